"""The `specdec` command line."""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import NoReturn

import torch
from tqdm import tqdm

from . import harness
from ..calibration import DEFAULT_DELTA, DEFAULT_WINDOW, MAX_LENGTH, Calibration, calibrate
from .cli_checks import (TREE_COUNTS, check_bench, check_counts, check_device, check_filter_flags, check_generate,
                         check_output_dir, check_output_file, check_profile, eagle_shape, flag_message, flag_names,
                         read_prompt_file, sampling_options, scorer_name)
from ..cost import CostModel, plot_fits
from ..datastore import HEADER, Datastore, orphaned_arrays
from ..generate import SpeculativeGenerator, Stats
from .harness import PROMPT_SETS
from .methods import METHODS, REGISTRY
from .models import DTYPES, load_model, load_tokenizer, one_line
from ..profiling import DEFAULT_SIZES, Profile, profile
from .cli_eagle import add_train_eagle_parser, cmd_train_eagle
from .evaluation import (EvalSettings, check_tokenizers, evaluate, load_datastore, load_eagle, print_table,
                         smart_profile)
from ..records import atomic_write_text
from ..valuspec import DEFAULT_UNIT, FixedThresholdFilter, ValuSpecFilter


MODEL_HELP = "a local path, a hub id, demo-target / demo-draft (the embedded pair) or smollm2"


TREE_TOPK = 4  # generate's --topk for the static trees when none is given (SMART then keeps its own default)


def add_tree_options(parser: argparse.ArgumentParser, depth: int = 5, topk: int | None = TREE_TOPK,
                     total_tokens: int = 32) -> None:
    parser.add_argument("--depth", type=int, default=depth, help="draft depth (chain and tree)")
    parser.add_argument("--topk", type=int, default=topk, help="children per frontier node (tree; smart too when "
                        f"given: default {TREE_TOPK} for trees, SmartSupplier's for smart)" if topk is None
                        else "children per frontier node (tree)")
    parser.add_argument("--total-tokens", type=int, default=total_tokens, help="tree size, root included (tree)")


def add_retrieval_options(parser: argparse.ArgumentParser, budget: int = 64) -> None:
    parser.add_argument("--datastore", type=Path, help="datastore folder (method retrieval; `specdec datastore "
                        "build`); default with the demo target: the standard library, built on first use and cached")
    parser.add_argument("--budget", type=int, default=None, help=f"tree size cap, root included (retrieval: default "
                        f"{budget}; smart: default none, the marginal rule alone decides)")


# The cost profile `specdec demo` and a `--profile`-less smart run measure (cached): the knee of the demo
# pair on a CPU lies within 128 nodes, and a 256-token context is what HumanEval prompts reach.
def add_smart_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", type=Path, help="cost profile of this pair (method smart; `specdec profile`); "
                        "default: profile it here, once, cached. With --valuspec it also gates scoring: a step is "
                        "scored only when the verification it saves beats the scoring")
    parser.add_argument("--alpha", type=float, default=0.8, help="SMART's aggressiveness (smart)")
    parser.add_argument("--benefit", choices=("paper", "expected"), default=None,
                        help="SMART's benefit rule (default: SmartSupplier's, expected)")
    parser.add_argument("--frontier", type=int, default=None,
                        help="nodes forwarded per layer and row (smart; default: SmartSupplier's)")
    parser.add_argument("--max-depth", type=int, default=12, help="most layers of a SMART tree")
    parser.add_argument("--padding-aware", action=argparse.BooleanOptionalAction, default=None,
                        help="SMART's padding-aware marginal cost for batches (default: on)")
    parser.add_argument("--no-planner", action="store_true", help="SMART drafts every step (no plain steps planned)")


def add_eagle_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--eagle", help="EAGLE head folder for methods eagle, eagle-chain and eagle-smart (config.json and "
                        "safetensors, EAGLE-3 or EAGLE-1/2 layout, trained for --target); default with the demo "
                        "target: its embedded head (demo-eagle)")


def add_sampling_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy (the default; output identical to "
                        "the target's greedy decoding); > 0: lossless sampling from the target's distribution")
    parser.add_argument("--top-k", type=int, default=None, help="sample among the k most likely tokens (with "
                        "--temperature > 0; default: off)")
    parser.add_argument("--top-p", type=float, default=None, help="sample from the smallest set of tokens whose "
                        "probability reaches p (with --temperature > 0; default: off)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the sampling generator (default: unseeded)")


def add_valuspec_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--valuspec", type=Path, help="filter every tree with ValuSpec, tau from this calibration file "
                       "(`specdec calibrate`)")
    group.add_argument("--fixed-threshold", type=float, help="filter with a fixed per-token probability cut-off "
                       "instead (the paper's baseline, 0.3-0.8)")
    parser.add_argument("--scorer", help="ValuSpec's scorer model; default: --draft, or demo-draft with the demo "
                        "target; " + MODEL_HELP)
    parser.add_argument("--audit", action="store_true", help="also verify unfiltered trees to count false discards "
                        "(one more target forward per step)")
    parser.add_argument("--valuspec-unit", choices=("branch", "prefix"), default=None, help="keep whole branches "
                        "scoring >= tau (the paper) or every node whose own path does, with its ancestors (default: "
                        f"{DEFAULT_UNIT} with --valuspec, branch with --fixed-threshold)")
    parser.add_argument("--single-tau", action="store_true", help="judge every branch by the calibration's one tau "
                        "(the paper's rule) instead of the tau of its length")


def add_calibrate_parser(sub: argparse._SubParsersAction) -> None:
    cal = sub.add_parser("calibrate", help="ValuSpec's tau: the target's greedy outputs scored by the scorer")
    cal.add_argument("--target", required=True, help=MODEL_HELP)
    cal.add_argument("--scorer", required=True, help="a small LM sharing the target's tokenizer; " + MODEL_HELP)
    cal.add_argument("--prompts", required=True, help=f"a prompt set ({', '.join(PROMPT_SETS)}) or a file (one prompt "
                     "per line, or .jsonl with 'prompt' or Spec-Bench 'turns')")
    cal.add_argument("--num-prompts", type=int, help="the first N prompts (default: all)")
    cal.add_argument("--max-new-tokens", type=int, default=128)
    cal.add_argument("--window", type=int, default=None, help=f"branch length of the single tau (--single-tau; "
                     f"default {DEFAULT_WINDOW}, retrieval's continuation)")
    cal.add_argument("--max-length", type=int, default=None, help=f"calibrate a tau for every branch length up to this "
                     f"(default: min(--max-new-tokens, {MAX_LENGTH}))")
    cal.add_argument("--delta", type=float, default=DEFAULT_DELTA, help="tau_d = the delta-quantile of the scores of "
                     f"d-token windows (default {DEFAULT_DELTA}; the paper's is 0.05)")
    cal.add_argument("--chat", action="store_true", help="wrap prompts in the tokenizer's chat template")
    cal.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    cal.add_argument("--device", default="auto")
    cal.add_argument("--out", type=Path, required=True, help="calibration JSON")
    cal.add_argument("--quiet", action="store_true", help="no progress bar")


def add_profile_parser(sub: argparse._SubParsersAction) -> None:
    prof = sub.add_parser("profile", help="time target (and draft) tree forwards for SMART's cost model")
    prof.add_argument("--target", required=True, help=MODEL_HELP)
    prof.add_argument("--draft", help=MODEL_HELP)
    prof.add_argument("--eagle", help="profile this EAGLE head (a folder, or demo-eagle) as the drafter instead of "
                      "--draft: the profile method eagle-smart reads")
    prof.add_argument("--batch-sizes", type=int_list, default=[1, 4, 8, 16], help="comma-separated, e.g. 1,4,8")
    prof.add_argument("--context-len", type=int, default=512, help="tokens in the cache of every row")
    prof.add_argument("--sizes", type=int_list, default=list(DEFAULT_SIZES), help="tree sizes, comma-separated")
    prof.add_argument("--repeats", type=int, default=5)
    prof.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    prof.add_argument("--device", default="auto")
    prof.add_argument("--out", type=Path, required=True, help="profile JSON")
    prof.add_argument("--plot", type=Path, help="PNG of the fits, one panel per batch size")


def int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def add_datastore_parser(sub: argparse._SubParsersAction) -> None:
    store = sub.add_parser("datastore", help="build or inspect a retrieval datastore")
    cmds = store.add_subparsers(dest="datastore_command", required=True)
    build = cmds.add_parser("build", help="tokenise files, folders, .jsonl or .npy token arrays into a datastore")
    build.add_argument("--tokenizer", required=True, help="the target's tokenizer: " + MODEL_HELP)
    build.add_argument("--out", type=Path, required=True, help="datastore folder (created or replaced)")
    build.add_argument("sources", nargs="+", type=Path, help="files and folders (text files in them, recursively)")
    build.add_argument("--text-field", default="text", help="field holding the text in .jsonl lines")
    build.add_argument("--append", action="store_true", help="add to the datastore in --out instead of replacing it")
    build.add_argument("--quiet", action="store_true", help="no progress bar")
    info = cmds.add_parser("info", help="print a datastore's header and sizes as JSON")
    info.add_argument("dir", type=Path)


class OneLineParser(argparse.ArgumentParser):
    """argparse's own errors (a missing or malformed flag) as one line and status 2, like specdec's; the
    usage stays one `--help` away. Subcommand parsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"specdec: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="specdec", description="Tree-based speculative decoding for HF models.")
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="generate text with a speculative method; prints text and stats")
    gen.add_argument("--target", required=True, help=MODEL_HELP)
    gen.add_argument("--draft", help="draft model (methods chain and tree); " + MODEL_HELP)
    add_eagle_option(gen)
    gen.add_argument("--method", choices=METHODS, default="tree", help="; ".join(
        f"{m.name}: {m.summary}" for m in REGISTRY.values()))
    prompts = gen.add_mutually_exclusive_group(required=True)
    prompts.add_argument("--prompt", action="append", help="a prompt (repeat for several)")
    prompts.add_argument("--prompts-file", type=Path, help="a text file with one prompt per line, or .jsonl "
                         "with a 'prompt' (or Spec-Bench 'turns') field per line")
    gen.add_argument("--max-new-tokens", type=int, default=128)
    gen.add_argument("--batch-size", type=int, default=1)
    gen.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    gen.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ...")
    gen.add_argument("--tensor-parallel", action="store_true", help="shard the target over the processes of a "
                     "torchrun launch with its tp plan (each rank on its own device; the draft and scorer are "
                     "replicated); rank 0 prints")
    add_tree_options(gen, topk=None)
    add_retrieval_options(gen)
    add_smart_options(gen)
    add_valuspec_options(gen)
    add_sampling_options(gen)
    gen.add_argument("--json", action="store_true", help="print one JSON document instead of text")

    demo = sub.add_parser("demo", help="every method on HumanEval prompts with the embedded pair (static tree and "
                          "SMART also at batch 4): one table")
    demo.add_argument("--prompts", type=int, default=4, help="HumanEval prompts to run")
    demo.add_argument("--max-new-tokens", type=int, default=64)
    demo.add_argument("--device", default="auto")
    demo.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    demo.add_argument("--out", type=Path, default=Path("specdec-demo"), help="where demo.json and demo.png go")
    demo.add_argument("--quick", action="store_true", help="2 prompts, 16 new tokens, a small retrieval store "
                      "(a smoke test)")
    # The demo pair's best tree on a 2-core CPU among those measured (docs/demo-pair.md).
    add_tree_options(demo, depth=4, topk=2, total_tokens=10)
    # The embedded head's tree: the best of bench/eagle.sh's shapes at batch 1 and 4 together (docs/eagle.md).
    demo.add_argument("--eagle-shape", type=eagle_shape, default=(5, 2, 10), help="the EAGLE tree, "
                      "depth:topk:total_tokens")
    # Retrieval's budget on this CPU is not tuned yet: 16 nodes keep verification cheap (docs/retrieval.md).
    demo.add_argument("--budget", type=int, default=16, help="retrieval tree size, root included")
    add_sampling_options(demo)

    bench = sub.add_parser("bench", help="methods x prompt sets x batch sizes, to CSV/JSON and plots")
    bench.add_argument("--target", default="demo-target", help=MODEL_HELP)
    bench.add_argument("--draft", default=None, help="default: demo-draft with the demo target, none otherwise")
    bench.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    bench.add_argument("--prompt-sets", nargs="+", choices=PROMPT_SETS, default=["humaneval"])
    bench.add_argument("--num-prompts", type=int, default=8)
    bench.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4])
    bench.add_argument("--max-new-tokens", type=int, default=64)
    bench.add_argument("--repeats", type=int, default=1, help="timed runs per batch, the fastest counts (best of N)")
    bench.add_argument("--control", action="store_true", help="also run AR a second time, as ar-control, measured "
                       "like every method: its speedup over AR is each cell's noise floor")
    bench.add_argument("--device", default="auto")
    bench.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    bench.add_argument("--chat", action="store_true", help="wrap prompts in the tokenizer's chat template")
    bench.add_argument("--out", type=Path, default=Path("bench/out"))
    add_tree_options(bench)
    bench.add_argument("--datastore", type=Path, help="datastore folder for method retrieval; default with the demo "
                       "target: the standard library, built on first use and cached")
    bench.add_argument("--budgets", type=int, nargs="+", default=[64],
                       help="retrieval tree sizes, root included; several run as retrieval-<budget>")
    bench.add_argument("--tree-sizes", type=int, nargs="+", help="static tree sizes (--total-tokens); several run "
                       "as tree-<size>")
    bench.add_argument("--profile", type=Path, help="cost profile for method smart; default: profile the pair "
                       "here at the bench's batch sizes, once, cached. Given (or profiled for a planned method), "
                       "--valuspec-methods runs score only the steps where that pays")
    bench.add_argument("--smart-variants", nargs="+", default=["default"], help="SmartSupplier options per smart "
                       "and eagle-smart run: 'default' or key=value,... (alpha, budget, benefit, topk, frontier, "
                       "max_depth, padding_aware, early_stop, planner, online, margin, probe_every, reprofile, "
                       "fit_batch); several run as smart[<variant>], eagle-smart[<variant>]")
    bench.add_argument("--valuspec-methods", nargs="+", default=[], help="also run these runs (labels as in the "
                       "table: retrieval, retrieval-64, tree, smart, ...) through ValuSpec as <label>+valuspec, the "
                       "draft as scorer, tau calibrated once (cached) on the last --calibration-size prompts of the "
                       "first prompt set")
    bench.add_argument("--calibration-size", type=int, default=8, help="calibration prompts for --valuspec-methods")
    add_eagle_option(bench)
    bench.add_argument("--eagle-shapes", type=eagle_shape, nargs="+", help="EAGLE trees, depth:topk:total_tokens "
                       "each (default: --depth, --topk, --total-tokens); several run as eagle-<d>x<k>x<n>")
    bench.add_argument("--eagle-chain-depths", type=int, nargs="+", help="EAGLE chain depths (default --depth); "
                       "several run as eagle-chain-<depth>")
    add_sampling_options(bench)
    add_profile_parser(sub)
    add_datastore_parser(sub)
    add_calibrate_parser(sub)
    add_train_eagle_parser(sub)
    return parser


def make_filter(args: argparse.Namespace, calibration: Calibration | None, target, draft,
                cost: Profile | None = None) -> ValuSpecFilter | None:
    """The filter of --valuspec (its loaded `calibration`) or --fixed-threshold (None without either); the
    scorer is --scorer, else the draft itself (the same model object, so a draft supplier's log-probs are
    reused), else demo-draft with the demo target. With a cost profile at hand (`cost`: the method's, or
    --profile) it scores only the steps where that pays (`specdec.gate.CostGate`)."""
    if calibration is None and args.fixed_threshold is None:
        return None
    name = scorer_name(args)
    scorer = draft if draft is not None and name == args.draft else load_model(name, dtype=args.dtype,
                                                                                 device=str(target.device),
                                                                                 what="--scorer")
    unit = {"unit": args.valuspec_unit} if args.valuspec_unit else {}  # else the filter's own default
    if calibration is None:
        return FixedThresholdFilter(scorer, args.fixed_threshold, audit=args.audit, cost_model=cost, **unit)
    if calibration.target != target.config._name_or_path or calibration.scorer != scorer.config._name_or_path:
        print(f"specdec: warning: {args.valuspec} was calibrated for {calibration.target} scored by "
              f"{calibration.scorer}", file=sys.stderr)
    return ValuSpecFilter(scorer, calibration, audit=args.audit, length_aware=not args.single_tau, cost_model=cost,
                          **unit)


def read_prompts(args: argparse.Namespace) -> list[str]:
    return list(args.prompt) if args.prompt else read_prompt_file("--prompts-file", args.prompts_file)


def cmd_generate(args: argparse.Namespace) -> int:
    check_generate(args)
    sampling, seed = sampling_options(args)
    prompts = read_prompts(args)
    calibration = Calibration.load(args.valuspec) if args.valuspec is not None else None  # before any model loads
    check_filter_flags(args)
    check_profile(args.profile)  # a bad file fails now, not after the models load
    tokenizer = load_tokenizer(args.target, "--target")
    filtering = args.valuspec is not None or args.fixed_threshold is not None
    check_tokenizers(tokenizer, {"draft": args.draft, "scorer": scorer_name(args) if filtering else None})
    # the datastore before the models: a wrong one fails in milliseconds
    method = REGISTRY[args.method]
    datastore = load_datastore(args.datastore, tokenizer, args.target) if "datastore" in method.needs else None
    target = load_model(args.target, dtype=args.dtype, device=args.device, tensor_parallel=args.tensor_parallel,
                        what="--target")
    draft = load_model(args.draft, dtype=args.dtype, device=str(target.device), what="--draft") if args.draft else None
    smart = {"alpha": args.alpha, "budget": args.budget, "benefit": args.benefit, "topk": args.topk,
             "frontier": args.frontier, "max_depth": args.max_depth, "padding_aware": args.padding_aware,
             "planner": not args.no_planner}
    smart = {k: v for k, v in smart.items() if v is not None or k == "budget"}  # unset: the supplier's defaults
    eagle = load_eagle(args.eagle, target, args.target) if "eagle" in method.needs else None
    drafter = eagle if "eagle" in method.needs else draft  # eagle-smart: --profile taken with the head
    # the profile of what drafts; a drafter the method needs and lacks is make_supplier's error
    drafts = "draft" in method.needs or "eagle" in method.needs
    cost = (smart_profile(args.profile, target, drafter, [args.batch_size])
            if "cost" in method.needs and (drafter is not None or not drafts) else None)
    supplier = harness.make_supplier(args.method, draft, depth=args.depth,
                                     topk=TREE_TOPK if args.topk is None else args.topk,
                                     total_tokens=args.total_tokens, datastore=datastore,
                                     budget=64 if args.budget is None else args.budget, cost=cost, smart=smart,
                                     eagle=eagle)
    gate_cost = cost if cost is not None else (Profile.load(args.profile) if args.profile is not None else None)
    generator = SpeculativeGenerator(target, supplier, make_filter(args, calibration, target, draft, gate_cost))
    rng = None if seed is None else torch.Generator(device=target.device).manual_seed(seed)
    results, stats = [], []
    batches = range(0, len(prompts), args.batch_size)
    for i in tqdm(batches, desc="prompts", unit="batch", disable=len(batches) < 2, file=sys.stderr):
        batch = prompts[i:i + args.batch_size]
        enc = tokenizer(batch, return_tensors="pt", padding=True).to(target.device)
        with torch.inference_mode():
            out = generator.generate(enc.input_ids, attention_mask=enc.attention_mask,
                                     max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                     temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
                                     generator=rng)
        new = out.sequences[:, enc.input_ids.shape[1]:]
        for prompt, row in zip(batch, new):
            results.append({"prompt": prompt, "completion": tokenizer.decode(row, skip_special_tokens=True)})
        stats.append(out.stats)
    summary = Stats.merge(stats).to_dict()
    if int(os.environ.get("RANK", "0")):  # under torchrun every rank decodes the same tokens; rank 0 prints
        return 0
    if args.json:
        print(json.dumps({"method": args.method, "sampling": {"temperature": sampling.temperature, "top_k": sampling.top_k,
                                                              "top_p": sampling.top_p, "seed": seed},
                          "results": results, "stats": summary}, indent=1))
        return 0
    for r in results:
        print(f"### {r['prompt']}\n{r['completion']}\n")
    print(f"method {args.method}: {summary['new_tokens']} tokens in {summary['steps']} steps, "
          f"{summary['tokens_per_second']:.1f} tok/s, mean accepted length {summary['mean_accepted_length']:.2f}, "
          f"mean tree size {summary['mean_tree_size']:.1f}")
    if "filter" in summary:
        f = summary["filter"]
        print(f"filter: kept {f['branch_keep_rate']:.1%} of branches, {f['node_keep_rate']:.1%} of nodes; empty trees "
              f"{f['empty_tree_rate']:.1%}, AR fallbacks {f['ar_fallback_rate']:.1%}"
              + (f", false discards {f['false_discard_rate']:.1%}" if f["audited"] else ""))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    check_counts(args, {"num_prompts": 1, "max_new_tokens": 1, "window": 1})
    if not 0 < args.delta < 1:
        raise ValueError(f"--delta: expected a number in (0, 1), got {args.delta}")
    if args.window is not None and args.window > args.max_new_tokens:
        raise ValueError(f"--window: {args.window} tokens exceeds --max-new-tokens {args.max_new_tokens}")
    check_output_file("--out", args.out)
    check_device(args)
    if args.prompts in PROMPT_SETS:
        texts = harness.load_prompts(args.prompts, args.num_prompts)
    elif not Path(args.prompts).is_file():
        raise ValueError(f"--prompts: {args.prompts!r} is neither a prompt set ({', '.join(PROMPT_SETS)}) nor a file")
    else:
        texts = read_prompt_file("--prompts", Path(args.prompts))[:args.num_prompts]
    tokenizer = load_tokenizer(args.target, "--target")
    check_tokenizers(tokenizer, {"scorer": args.scorer})
    target = load_model(args.target, dtype=args.dtype, device=args.device, what="--target")
    scorer = load_model(args.scorer, dtype=args.dtype, device=str(target.device), what="--scorer")
    # encoded here, not by calibrate(tokenizer=...): --chat wraps them, and those too long for the target's
    # positions are left out rather than refused
    prompts = harness.fit(harness.encode(tokenizer, texts, args.chat), target, args.max_new_tokens)
    cal = calibrate(target, scorer, prompts, tokenizer=tokenizer, max_new_tokens=args.max_new_tokens,
                    window=args.window, max_length=args.max_length, delta=args.delta, progress=not args.quiet)
    cal.save(args.out)
    taus = ", ".join(f"{t:.2f}" for t in cal.taus)
    print(f"wrote {args.out}: tau by branch length 1..{len(cal.taus)}: {taus} (mean log-prob per token; the "
          f"{cal.delta:g}-quantile of {cal.num_windows[0]} to {cal.num_windows[-1]} windows from {cal.num_prompts} "
          f"prompts); the single tau (length {cal.window}): {cal.tau:.4f}, probability {math.exp(cal.tau):.3f}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    check_counts(args, {**TREE_COUNTS, "prompts": 1, "budget": 1})
    check_output_dir("--out", args.out)
    check_device(args)
    sampling, seed = sampling_options(args)
    # Every registered method, in the registry's order. Static tree, SMART and EAGLE (alone and under
    # ValuSpec) at batch 1 and 4 (AR beside them for the speedups); the other methods at batch 1.
    # ValuSpec with the demo draft as scorer, on retrieval (batch 1) and EAGLE trees, calibrated on the last 3
    # HumanEval prompts (never among the evaluated ones, which come first).
    # --quick: 2 prompts, 16 new tokens, retrieval from the first 100 stdlib files (~0.5M tokens, seconds to
    # build) instead of all (~8.6M)
    settings = EvalSettings(
        target="demo-target", draft="demo-draft", prompt_sets=("humaneval",), methods=METHODS,
        num_prompts=2 if args.quick else args.prompts, max_new_tokens=16 if args.quick else args.max_new_tokens,
        dtype=args.dtype, device=args.device, sampling=sampling, seed=seed,
        batch_sizes=(1, 4), wide_methods=("ar", "tree", "smart", "eagle", "eagle-smart"),
        depth=args.depth, topk=args.topk, total_tokens=args.total_tokens, budgets=(args.budget,),
        stdlib_files=100 if args.quick else None, eagle_shapes=(args.eagle_shape,),
        eagle_chain_depths=(args.eagle_shape[0],), valuspec_methods=("retrieval", "eagle"),
        calibration_prompts=tuple(harness.load_prompts("humaneval")[-3:]))
    results, env = evaluate(settings)
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    doc = {"environment": env, "results": [r.row() for r in results],
           "all_identical": all(r.identical_to_ar for r in results) if sampling.greedy else None}
    with tempfile.TemporaryDirectory(prefix=".demo-plots-", dir=args.out) as tmp:  # gone if interrupted
        plots = harness.plot_results(results, Path(tmp), f"specdec demo pair on {env['device']}")
        os.replace(plots[0], args.out / "demo.png")
    atomic_write_text(args.out / "demo.json", json.dumps(doc, indent=1))
    print(f"wrote {args.out / 'demo.json'} and {args.out / 'demo.png'}")
    return 0 if doc["all_identical"] is not False else 1  # None: sampled, draws are not compared with AR


def bench_settings(args: argparse.Namespace, draft: str | None) -> EvalSettings:
    """`bench`'s flags as the settings of `evaluate`."""
    sampling, seed = sampling_options(args)
    # ValuSpec's calibration prompts: the first set's last ones, disjoint from the evaluated first
    # --num-prompts unless the set is that small.
    calibration = harness.load_prompts(args.prompt_sets[0])[-args.calibration_size:] if args.valuspec_methods else []
    return EvalSettings(
        target=args.target, draft=draft, prompt_sets=tuple(args.prompt_sets), num_prompts=args.num_prompts,
        methods=tuple(args.methods), batch_sizes=tuple(args.batch_sizes), max_new_tokens=args.max_new_tokens,
        dtype=args.dtype, device=args.device, chat=args.chat, sampling=sampling, seed=seed, repeats=args.repeats,
        control=args.control, depth=args.depth, topk=args.topk, total_tokens=args.total_tokens,
        tree_sizes=tuple(args.tree_sizes or ()), budgets=tuple(args.budgets), datastore=args.datastore,
        profile=args.profile, smart_variants=tuple(args.smart_variants), eagle=args.eagle,
        eagle_shapes=tuple(args.eagle_shapes or ()), eagle_chain_depths=tuple(args.eagle_chain_depths or ()),
        valuspec_methods=tuple(args.valuspec_methods), calibration_prompts=tuple(calibration))


def cmd_bench(args: argparse.Namespace) -> int:
    results, env = evaluate(bench_settings(args, check_bench(args)))
    print_table(results)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"{time.strftime('%Y%m%d-%H%M%S')}-e2e"
    while out.exists():  # two runs in one second
        out = out.with_name(out.name + "+")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=args.out))  # renamed when complete
    try:
        write_bench(staging, args, results, env)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    print(f"wrote {out}")
    return 0 if all(r.identical_to_ar is not False for r in results) else 1  # None: sampled runs


def write_bench(out: Path, args: argparse.Namespace, results: list[harness.MethodResult], env: dict) -> None:
    """results.json, results.csv and the plots of a bench run into the folder `out`."""
    rows = [{**r.row(), **{k: v for k, v in env.items() if not isinstance(v, dict)}} for r in results]
    (out / "results.json").write_text(json.dumps({"environment": env, "results": [r.row() for r in results]}, indent=1))
    with open(out / "results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    harness.plot_results(results, out, f"{args.target} on {env['device']}")
    if "smart" in env:
        prof = Profile.from_dict(env["smart"]["profile"])
        plot_fits([CostModel.fit(prof, b) for b in sorted(set(args.batch_sizes))], out / "cost_fit.png")


def cmd_profile(args: argparse.Namespace) -> int:
    check_counts(args, {"batch_sizes": 1, "sizes": 1, "repeats": 1, "context_len": 1})
    for flag, values in (("--batch-sizes", args.batch_sizes), ("--sizes", args.sizes)):
        if not values or values != sorted(set(values)):
            raise ValueError(f"{flag}: expected increasing sizes, got {values}")
    if len(args.sizes) < 3:
        raise ValueError(f"--sizes: the fit needs at least 3 tree sizes, got {args.sizes}")
    check_output_file("--out", args.out)
    if args.plot:
        check_output_file("--plot", args.plot)
    check_device(args)
    target = load_model(args.target, dtype=args.dtype, device=args.device, what="--target")
    if args.draft and args.eagle:
        raise ValueError("--eagle: profiles the head as the drafter; pass --draft or --eagle, not both")
    draft = load_model(args.draft, dtype=args.dtype, device=str(target.device), what="--draft") if args.draft else None
    if args.eagle:
        draft = load_eagle(args.eagle, target, args.target)
    prof = profile(target, draft, batch_sizes=tuple(args.batch_sizes), context_len=args.context_len,
                   sizes=tuple(args.sizes), repeats=args.repeats)
    prof.save(args.out)
    models = [CostModel.fit(prof, b) for b in prof.batch_sizes]
    for m in models:
        draft = (f"; draft layer 1/8 wide {m.draft_seconds(1) * 1e3:.2f}/{m.draft_seconds(8) * 1e3:.2f} ms, catch-up of "
                 f"1/32 {m.catch_up_seconds(1) * 1e3:.2f}/{m.catch_up_seconds(32) * 1e3:.2f} ms" if m.draft_layer else "")
        print(f"batch {m.batch_size}: AR step {m.ar_step * 1e3:.2f} ms; verify {m.verify.form} fit (errors: paper "
              f"{m.verify.errors['paper']:.1%}, intercept {m.verify.errors['intercept']:.1%}), 2/64 nodes "
              f"{m.verify_seconds(2) * 1e3:.2f}/{m.verify_seconds(64) * 1e3:.2f} ms{draft}")
    for note in prof.notes:
        print(f"note: {note}")
    if args.plot:
        plot_fits(models, args.plot)
    print(f"wrote {args.out}" + (f" and {args.plot}" if args.plot else ""))
    return 0


def cmd_datastore(args: argparse.Namespace) -> int:
    if args.datastore_command == "info":
        print(json.dumps(Datastore.open(args.dir).info(), indent=1))
        return 0
    check_output_dir("--out", args.out)
    missing = [str(p) for p in args.sources if not p.exists()]
    if missing:
        raise ValueError(f"sources: no such file or folder: {', '.join(missing)}")
    if args.append and orphaned_arrays(args.out):
        raise ValueError(f"--append: {args.out} holds datastore arrays but no {HEADER} (a write interrupted by an "
                         "older specdec): appending would drop its documents; rebuild it from all its sources")
    tokenizer = load_tokenizer(args.tokenizer, "--tokenizer")
    if args.append and (args.out / HEADER).is_file():
        store = Datastore.open(args.out, tokenizer=tokenizer).extend(
            tokenizer, args.sources, text_field=args.text_field, progress=not args.quiet)
    else:
        store = Datastore.build(tokenizer, args.sources, args.out, text_field=args.text_field, progress=not args.quiet)
    info = store.info()
    print(f"wrote {store.path}: {info['documents']} documents, {info['num_tokens']} tokens (separators included), "
          f"{info['total_bytes'] / 2**20:.1f} MiB")
    return 0


# The flag of each parameter the app layer and the library name in their errors ("draft: ..." is reported
# as "--draft: ..."); the running command's own flags (`flag_names`: a dest names its flag) come first.
PARAMETER_FLAGS = {"target": "--target", "draft": "--draft", "scorer": "--scorer", "eagle": "--eagle",
                   "datastore": "--datastore", "cost": "--profile", "max_new_tokens": "--max-new-tokens",
                   "batch_sizes": "--batch-sizes", "budgets": "--budgets", "seed": "--seed",
                   "smart_variants": "--smart-variants", "valuspec_methods": "--valuspec-methods", "out_dir": "--out"}


COMMANDS = {"generate": cmd_generate, "demo": cmd_demo, "bench": cmd_bench, "profile": cmd_profile,
            "datastore": cmd_datastore, "calibrate": cmd_calibrate, "train-eagle": cmd_train_eagle}


def main(argv: list[str] | None = None) -> int:
    """Run a command; a user error is one line on stderr and status 2, Ctrl-C one line and status 130
    (outputs are written to temporary names and renamed when complete, so none is left half-written)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130
    except (ValueError, OSError) as err:  # user errors (OSError: an unreadable file, a full disk)
        message = flag_message(one_line(err), {**PARAMETER_FLAGS, **flag_names(parser, args)})
        print(f"specdec: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
