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

import torch
from tqdm import tqdm

from . import harness
from ..calibration import Calibration, calibrate
from .cli_checks import (TREE_COUNTS, check_bench, check_counts, check_device, check_filter_flags, check_generate,
                         check_output_dir, check_output_file, check_profile, flag_message, flag_names,
                         read_prompt_file, sampling_options, scorer_name)
from ..cost import CostModel, plot_fits
from ..datastore import HEADER, Datastore, orphaned_arrays
from ..generate import SpeculativeGenerator, Stats
from .harness import PROMPT_SETS
from .methods import METHODS, REGISTRY
from .models import load_model, load_tokenizer, one_line
from ..profiling import Profile, profile
from .cli_eagle import cmd_train_eagle
from .parser import TREE_TOPK, build_parser
from .evaluation import (EvalSettings, check_tokenizers, evaluate, load_datastore, load_eagle, print_table,
                         smart_profile)
from ..records import atomic_write_text
from ..valuspec import FixedThresholdFilter, ValuSpecFilter


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
    smart = {"alpha": args.alpha, "budget": args.budget, "benefit": args.benefit, "selection": args.selection,
             "topk": args.topk, "frontier": args.frontier, "max_depth": args.max_depth,
             "padding_aware": args.padding_aware, "planner": not args.no_planner}
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
