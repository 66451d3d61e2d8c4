"""The `specdec` command's argument parser: every subcommand's flags and their help (`build_parser`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NoReturn

from ..calibration import DEFAULT_DELTA, DEFAULT_WINDOW, MAX_LENGTH
from ..profiling import DEFAULT_SIZES
from ..valuspec import DEFAULT_UNIT
from .cli_checks import eagle_shape, int_list
from .cli_eagle import add_train_eagle_parser
from .harness import PROMPT_SETS
from .methods import METHODS, REGISTRY
from .models import DTYPES

__all__ = ["MODEL_HELP", "TREE_TOPK", "build_parser"]


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
    parser.add_argument("--selection", choices=("global", "layered"), default=None,
                        help="SMART's tree: one ranking of every layer's candidates, or each layer kept before the "
                        "next is drafted (default: SmartSupplier's, global)")
    parser.add_argument("--frontier", type=int, default=None,
                        help="nodes forwarded per layer and row (smart; default: SmartSupplier's)")
    parser.add_argument("--max-depth", type=int, default=None,
                        help="most layers of a SMART tree (default: 6 over an EAGLE head, 12 over a draft model)")
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
                       "fit_batch, window); several run as smart[<variant>], eagle-smart[<variant>]")
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
