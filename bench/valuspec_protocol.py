"""ValuSpec's protocol (the paper's; docs/valuspec.md): calibrate on 70% of a prompt set, evaluate on the rest.

For each prompt set (HumanEval; Spec-Bench, all of it or by category as ``spec_bench:<category>``):
  1. split its prompts 70% calibration / 30% evaluation (a seeded shuffle);
  2. decode the calibration prompts greedily with the target (AR, untimed);
  3. calibrate from those outputs (`specdec.calibrate(outputs=...)`): tau_d for every branch length d up
     to 32, at --delta (default 0.01, calibrate's), at the paper's 0.05 for its configuration, and at
     every delta a configuration names (NAME@DELTA); the paper's single tau of a supplier is tau at its
     branch length (the window rule: the retrieval continuation 10, the static tree's and the EAGLE
     tree's depth, SMART's max depth 12);
  4. datastore = the standard library store + the target's responses on the calibration split
     (a copy of the cached stdlib store, then `Datastore.extend`);
  5. on the evaluation prompts, at each batch size, one run per method, all of them interleaved (each
     round decodes every batch with every run in turn; best of --repeats per batch), ratios from this
     one process:
     AR; each supplier (retrieval, draft tree, SMART, the EAGLE head's tree) alone and through ValuSpec
     in each configuration of `--configs`: paper (whole branches, single tau), branch (whole branches,
     tau by length), prefix-single (prefix unit, single tau), prefix (prefix unit, tau by length); retrieval + fixed thresholds
     (`fixed`) and retrieval + ValuSpec calibrated on every other set (`transfer`, cross-dataset); with
     `--gate` every ValuSpec configuration also with the cost gate (`specdec.gate.CostGate` over SMART's
     profile of the pair, measured in the same run), labelled +gate. Then,
     untimed, every filtered run once more in audit mode at each of `--audit-batch-sizes` (false
     discards: the audit adds a target forward per step, so it never shares a timed run).

Reported per run: tokens/s, speedup vs AR, mean accepted length (bonus included), verified tree size,
identity with AR, the filter's stats (branches/nodes kept, empty-tree and AR-fallback rates, acceptance
rate of the retained candidates, false discards from the audit) and the filter stage's share of step time
(the scorer's cost). Writes OUT/results.csv and OUT/results.json with the environment (device, versions,
commit, settings, calibrations), and OUT/summary.csv: one row per set, method and batch size with the
timed run's speed beside its audit's false-discard rate.

    python bench/valuspec_protocol.py                      # the full protocol (see --help for the sizes)
    python bench/valuspec_protocol.py --smoke --out /tmp/vs # tiny settings: the pipeline end to end

Never run it for figures on a loaded machine: ratios between methods are only meaningful from one quiet run.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import shutil
import sys
import time
from dataclasses import asdict, replace
from importlib import resources
from pathlib import Path

import torch
from tqdm import tqdm

from specdec.app import harness
from specdec.app.evaluation import AUTO_PROFILE, load_eagle
from specdec.app.models import DTYPES, load_model, load_tokenizer
from specdec.calibration import DEFAULT_DELTA, DEFAULT_WINDOW, Calibration, calibrate
from specdec.datastore import Datastore, stdlib_datastore
from specdec.profiling import cached_profile
from specdec.records import provenance
from specdec.valuspec import FixedThresholdFilter, ValuSpecFilter


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", default="demo-target")
    p.add_argument("--draft", default="demo-draft", help="draft of the tree and SMART runs")
    p.add_argument("--scorer", default=None, help="ValuSpec's scorer (default: the draft, the same model object)")
    p.add_argument("--prompt-sets", nargs="+", default=["humaneval", "spec_bench"],
                   help="humaneval, spec_bench, or spec_bench:<category> (translation, summarization, qa, "
                   "math_reasoning, rag, or an MT-Bench one: writing, roleplay, reasoning, math, coding, ...)")
    p.add_argument("--num-prompts", type=int, default=40, help="prompts per set before the split")
    p.add_argument("--calibration-share", type=float, default=0.7)
    p.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8])
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=1, help="rounds of the interleaved runs; per batch the fastest "
                   "round counts (best of N)")
    p.add_argument("--delta", type=float, default=DEFAULT_DELTA, help="calibration delta of the configurations "
                   f"without @DELTA (default {DEFAULT_DELTA}), except paper: {PAPER_DELTA}")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.3, 0.5, 0.8], help="fixed-threshold baseline")
    p.add_argument("--budget", type=int, default=64, help="retrieval tree size, root included")
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--topk", type=int, default=2)
    p.add_argument("--total-tokens", type=int, default=10)
    p.add_argument("--no-draft-methods", action="store_true", help="skip the tree, SMART and EAGLE runs")
    p.add_argument("--eagle", default=None, help="EAGLE head of the eagle runs (default: the embedded head with "
                   "demo-target, none with other targets; 'none': no eagle runs)")
    p.add_argument("--eagle-shape", default="6:4:16", help="the EAGLE tree: depth:topk:total_tokens")
    p.add_argument("--configs", nargs="+", default=list(CONFIGS) + ["fixed", "transfer"],
                   help=f"filter configurations to run: {', '.join(CONFIGS)} (each also as NAME@DELTA, calibrated "
                   "at that delta instead of --delta), fixed, transfer")
    p.add_argument("--gate", action="store_true", help="also run every ValuSpec configuration with the cost gate "
                   "(scores a step only when SMART's step cost model says it pays), labelled +gate")
    p.add_argument("--audit-batch-sizes", type=int, nargs="*", default=[1], help="batch sizes of the untimed audits")
    p.add_argument("--stdlib-files", type=int, default=None, help="first N stdlib files in the store (default all)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--smoke", action="store_true", help="tiny settings: 5 prompts per set, 12 new tokens, batch 1 "
                   "and 2, 100 stdlib files, one threshold")
    p.add_argument("--out", type=Path, default=None, help="default bench/results/<date>-valuspec")
    args = p.parse_args(argv)
    for config in args.configs:
        name, _, delta = config.partition("@")
        if name not in CONFIGS and (delta or name not in ("fixed", "transfer")):
            p.error(f"--configs: unknown configuration {config!r}")
        try:
            if delta and not 0 < float(delta) < 1:
                raise ValueError
        except ValueError:
            p.error(f"--configs: the delta of {config!r} must be a number in (0, 1)")
    if args.smoke:
        args.num_prompts, args.max_new_tokens, args.batch_sizes = 5, 12, [1, 2]
        args.stdlib_files, args.thresholds, args.budget = 100, [0.5], 16
        args.audit_batch_sizes = [1]
    try:
        args.eagle_shape = tuple(int(x) for x in args.eagle_shape.split(":"))
        if len(args.eagle_shape) != 3 or min(args.eagle_shape) < 1:
            raise ValueError
    except ValueError:
        p.error(f"--eagle-shape: expected depth:topk:total_tokens (positive ints), got {args.eagle_shape!r}")
    args.out = args.out or Path("bench/results") / f"{time.strftime('%Y-%m-%d')}-valuspec"
    return args


def load_set(name: str, count: int) -> list[str]:
    """A prompt set; ``spec_bench:<category>`` is one Spec-Bench category (first turns, file order)."""
    if not name.startswith("spec_bench:"):
        return harness.load_prompts(name, count)
    category = name.split(":", 1)[1]
    text = resources.files("specdec").joinpath("data/spec_bench/question.jsonl").read_text(encoding="utf-8")
    prompts = [q["turns"][0] for q in map(json.loads, filter(str.strip, text.splitlines())) if q["category"] == category]
    if not prompts:
        raise ValueError(f"--prompt-sets: no Spec-Bench category {category!r}")
    return prompts[:count]


def prepare(args, name: str, tokenizer, target, scorer) -> dict:
    """Split, decode the calibration split, calibrate (every length), and build the set's datastore."""
    tokens = harness.fit(harness.encode(tokenizer, load_set(name, args.num_prompts), False), target,
                         args.max_new_tokens)
    random.Random(args.seed).shuffle(tokens)
    cut = max(1, round(len(tokens) * args.calibration_share))
    cal, ev = tokens[:cut], tokens[cut:]
    if not ev:
        raise ValueError(f"--num-prompts: {len(tokens)} prompts of {name} leave none for evaluation")
    _, outputs = harness.run_method(target, harness.make_supplier("ar", None), cal, batch_size=8,
                                    max_new_tokens=args.max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                    eos_token_id=tokenizer.eos_token_id, method="ar", prompt_set=name)
    outputs = [trim(o, tokenizer) for o in outputs]
    deltas = {args.delta} | {config_delta(args, c) for c in args.configs if c.partition("@")[0] in CONFIGS}
    calibrations = {d: calibrate(target, scorer, cal, max_new_tokens=args.max_new_tokens,
                                 window=min(DEFAULT_WINDOW, args.max_new_tokens), delta=d, outputs=outputs)
                    for d in sorted(deltas)}
    base = stdlib_datastore(tokenizer, max_files=args.stdlib_files)
    path = args.out / "datastores" / name.replace(":", "-")
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(base.path, path)
    store = Datastore.open(path, tokenizer=tokenizer).extend(tokenizer, texts=[tokenizer.decode(o) for o in outputs])
    return {"eval": ev, "calibrations": calibrations, "calibration": calibrations[args.delta], "store": store,
            "num_calibration": len(cal)}


def trim(tokens: list[int], tokenizer) -> list[int]:
    """A continuation up to and including its EOS (the rest is padding)."""
    eos = tokenizer.eos_token_id
    return tokens[: tokens.index(eos) + 1] if eos in tokens else tokens


# ValuSpec configurations: (unit, thresholds by length). "paper" is the paper's rule, at the paper's delta.
CONFIGS = {"paper": ("branch", False), "branch": ("branch", True), "prefix-single": ("prefix", False),
           "prefix": ("prefix", True)}
PAPER_DELTA = 0.05
AUTO_SMART_DEPTH = 12  # SmartSupplier's default max_depth: its branches' length bound


def config_delta(args, config: str) -> float:
    """The calibration delta of a configuration: its @DELTA, else the paper's for "paper", else --delta."""
    name, _, delta = config.partition("@")
    return float(delta) if delta else PAPER_DELTA if name == "paper" else args.delta


def filters(args, scorer, calibrations: dict[float, Calibration], length: int, cost) -> list[tuple[str, object]]:
    """(suffix, filter factory) per ValuSpec configuration in --configs; the single tau is tau at
    `length`, the supplier's branch length (the paper's window rule). With --gate each also with the cost
    gate over `cost` (each factory call makes a fresh gate: nothing learned carries between runs)."""
    out = []
    for config in args.configs:
        name = config.partition("@")[0]
        if name not in CONFIGS:
            continue
        cal = calibrations[config_delta(args, config)]
        single = replace(cal, window=min(length, len(cal.taus)))
        unit, by_length = CONFIGS[name]
        for gated in (False, True) if args.gate else (False,):
            out.append((f"+valuspec-{config}" + ("+gate" if gated else ""),
                        lambda audit=False, unit=unit, by_length=by_length, c=single, g=gated: ValuSpecFilter(
                            scorer, c, unit=unit, length_aware=by_length, audit=audit,
                            cost_model=cost if g else None)))
    return out


def runs_for(args, name: str, sets: dict, draft, scorer, cost, head=None) -> list[tuple[str, str, object, object]]:
    """(label, calibrated_on, supplier factory, filter factory) of one prompt set's runs; head: the EAGLE
    head of the eagle runs (None: none)."""
    own = sets[name]["calibrations"]
    store = sets[name]["store"]
    retr = lambda: harness.make_supplier("retrieval", None, datastore=store, budget=args.budget)  # noqa: E731
    suppliers = [("retrieval", retr, DEFAULT_WINDOW)]
    if draft is not None:
        suppliers += [("tree", lambda: harness.make_supplier("tree", draft, depth=args.depth, topk=args.topk,
                                                             total_tokens=args.total_tokens), args.depth),
                      ("smart", lambda: harness.make_supplier("smart", draft, cost=cost), AUTO_SMART_DEPTH)]
    if head is not None:  # its branches are at most the tree's depth long
        suppliers.append(("eagle", lambda: harness.make_supplier("eagle", None, eagle=head, eagle_shape=args.eagle_shape),
                          args.eagle_shape[0]))
    runs = [("ar", "", lambda: harness.make_supplier("ar", None), None)]
    for label, supplier, length in suppliers:
        runs.append((label, "", supplier, None))
        runs += [(label + suffix, name, supplier, filt) for suffix, filt in filters(args, scorer, own, length, cost)]
    if "fixed" in args.configs:
        runs += [(f"retrieval+fixed-{p:g}", "", retr, (lambda p=p: lambda audit=False: FixedThresholdFilter(
            scorer, p, audit=audit))()) for p in args.thresholds]
    if "transfer" in args.configs:
        runs += [(f"retrieval+valuspec[{other}]", other, retr, (lambda c=sets[other]["calibration"]: lambda audit=False:
                  ValuSpecFilter(scorer, c, audit=audit))()) for other in sets if other != name]
    return runs


def measure(args, name: str, sets: dict, target, tokenizer, draft, scorer, cost, head=None) -> list[dict]:
    """Every run of one set at every batch size, timed interleaved (each round generates every batch with
    every run in turn, so a drift of the machine's speed reaches all runs alike), then the filtered runs'
    audits at batch 1."""
    rows = []
    runs = runs_for(args, name, sets, draft, scorer, cost, head)
    prompts = sets[name]["eval"]
    common = dict(pad_token_id=tokenizer.pad_token_id, prompt_set=name)
    for bs in args.batch_sizes:
        cell = []  # (calibrated_on, Run): one supplier and filter per run, warmed up, then measured together
        for label, cal_on, supplier, filt in tqdm(runs, desc=f"{name}, batch {bs}, warm-up", file=sys.stderr):
            run = harness.Run(label, supplier(), filt() if filt else None)
            harness.run_method(target, run.supplier, prompts[:bs], batch_size=bs, max_new_tokens=4, eos_token_id=None,
                               method=label, filter=run.filter, **common)
            cell.append((cal_on, run))
        measured = harness.run_interleaved(target, [run for _, run in cell], prompts, batch_size=bs,
                                           max_new_tokens=args.max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                                           repeats=args.repeats, **common)
        results, outputs = [], {}
        for (cal_on, run), (result, out) in zip(cell, measured):
            results.append(result)
            outputs[(run.method, name, bs)] = out
            rows.append({"calibrated_on": cal_on, "audit": False, "result": result})
        harness.compare_to_ar(results, outputs)
    for bs in args.audit_batch_sizes:
        for label, cal_on, supplier, filt in runs:
            if filt is not None:  # untimed: the audit verifies the unfiltered tree too
                result, _ = harness.run_method(target, supplier(), prompts, batch_size=bs, method=label,
                                               max_new_tokens=args.max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                                               filter=filt(audit=True), **common)
                rows.append({"calibrated_on": cal_on, "audit": True, "result": result})
    return rows


def flatten(row: dict) -> dict:
    r = row["result"]
    out = {**{k: v for k, v in r.row().items() if k != "filter"}, "calibrated_on": row["calibrated_on"],
           "audit_run": row["audit"]}
    for key, value in (r.filter or {}).items():
        out[f"filter_{key}"] = value
    return out


def summarize(flat: list[dict]) -> list[dict]:
    """One row per set, method and timed batch size: speed, accepted length, the filter's stats, and the
    false-discard rates of the audit at the same batch size (or, when none ran there, at batch 1): all of
    them, and those the threshold rule made (the rest are a cost gate's sizing)."""
    audits = {(r["prompt_set"], r["method"], r["batch_size"]): r for r in flat if r["audit_run"]}
    out = []
    for r in (r for r in flat if not r["audit_run"]):
        key = (r["prompt_set"], r["method"])
        audit = audits.get(key + (r["batch_size"],)) or audits.get(key + (1,))
        out.append({"prompt_set": r["prompt_set"], "method": r["method"], "batch_size": r["batch_size"],
                    "speedup_vs_ar": r["speedup_vs_ar"], "speedup_paired": r.get("speedup_paired"),
                    "tokens_per_second": r["tokens_per_second"],
                    "mean_accepted_length": r["mean_accepted_length"], "mean_tree_size": r["mean_tree_size"],
                    "identical_to_ar": r["identical_to_ar"],
                    **{k: r.get(f"filter_{k}") for k in ("branch_keep_rate", "node_keep_rate", "empty_tree_rate",
                                                         "ar_fallback_rate", "acceptance_rate")},
                    "filter_share": r.get("filter_share"),
                    "false_discard_rate": audit["filter_false_discard_rate"] if audit else None,
                    "rule_discard_rate": audit.get("filter_rule_discard_rate") if audit else None,
                    "audit_batch_size": audit["batch_size"] if audit else None})
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    tokenizer = load_tokenizer(args.target)
    target = load_model(args.target, dtype=args.dtype, device=args.device)
    draft = None if args.no_draft_methods else load_model(args.draft, dtype=args.dtype, device=str(target.device))
    scorer = load_model(args.scorer, dtype=args.dtype, device=str(target.device)) if args.scorer else (
        draft if draft is not None else load_model(args.draft, dtype=args.dtype, device=str(target.device)))
    # SMART's profile of the pair; with --gate also without the draft methods (the scorer is the draft model)
    cost = (cached_profile(target, draft or scorer, batch_sizes=tuple(args.batch_sizes), **AUTO_PROFILE)
            if draft is not None or args.gate else None)
    head = None if draft is None or args.eagle == "none" else load_eagle(args.eagle, target, args.target)
    with torch.inference_mode():
        sets = {name: prepare(args, name, tokenizer, target, scorer) for name in args.prompt_sets}
        rows = [row for name in args.prompt_sets
                for row in measure(args, name, sets, target, tokenizer, draft, scorer, cost, head)]
    env = {**provenance(), "target": args.target, "draft": None if draft is None else args.draft,
           "eagle": None if head is None else (args.eagle or "demo-eagle"),
           "scorer": args.scorer or args.draft, "settings": {k: str(v) if isinstance(v, Path) else v
                                                            for k, v in vars(args).items()},
           "calibrations": {name: {d: asdict(c) for d, c in s["calibrations"].items()} for name, s in sets.items()},
           "datastores": {name: s["store"].info() for name, s in sets.items()},
           "split": {name: {"calibration": s["num_calibration"], "evaluation": len(s["eval"])} for name, s in sets.items()}}
    flat = [flatten(r) for r in rows]
    (args.out / "results.json").write_text(json.dumps({"environment": env, "results": flat}, indent=1, default=str))
    with open(args.out / "results.csv", "w", newline="") as f:
        fields = list(dict.fromkeys(k for r in flat for k in r))
        writer = csv.DictWriter(f, fieldnames=fields + ["device", "commit", "dtype"])
        writer.writeheader()
        writer.writerows({**r, "device": env["device"], "commit": env["commit"], "dtype": args.dtype} for r in flat)
    summary = summarize(flat)
    with open(args.out / "summary.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    for r in summary:
        print(" ".join(f"{v:.3f}" if isinstance(v, float) else str(v) for v in r.values()))
    print(f"wrote {args.out}/results.csv, results.json and summary.csv")
    return 0 if all(r["identical_to_ar"] for r in flat if not r["audit_run"]) else 1


if __name__ == "__main__":
    sys.exit(main())
