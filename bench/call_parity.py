"""Where a planned method's calls lose to AR's: every call split into its prompt step and the rest.

    python bench/call_parity.py --method smart --batch 8 --rounds 12 --out parity.json

Runs AR and the method (SMART over the demo draft, or EAGLE-3 + SMART over the demo head) on the same
batches of the embedded pair, alternating which goes first, for --rounds rounds. Per call it keeps the wall
time, the first step (which also forwards the prompt block: at Spec-Bench batch 8 one 243-token prompt pads
all 8 rows to it), the sum of the other steps, their median, the setup (`Stats.stage_seconds["prefill"]`)
the stages' totals (propose, verify, commit) and the steps that drafted. The summary gives, per batch, each part's minimum and median for both runs
and the paired ratio of AR's wall time over the method's (round by round, then the median and the share
of rounds the method won): a best-of-3 cell of `specdec bench` reads one draw of that ratio's spread.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

from specdec import SpeculativeGenerator
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance

PARTS = ("wall", "prompt_step", "other_steps", "step_median", "setup", "propose", "verify", "commit")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", choices=("smart", "eagle-smart"), default="smart")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--prompt-set", default="spec_bench")
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=None, help="write every call and the summary here (JSON)")
    args = ap.parse_args(argv)
    if args.rounds < 2:
        raise ValueError(f"--rounds: expected at least 2, got {args.rounds}")

    tok = load_tokenizer("demo-target", "--target")
    target = load_model("demo-target", dtype="float32", device=args.device, what="--target")
    if args.method == "eagle-smart":
        drafter = load_eagle(None, target, "demo-target")
        supplier = harness.make_supplier("eagle-smart", None, eagle=drafter,
                                         cost=smart_profile(None, target, drafter, [args.batch]))
    else:
        drafter = load_model("demo-draft", dtype="float32", device=args.device, what="--draft")
        supplier = harness.make_supplier("smart", drafter, cost=smart_profile(None, target, drafter, [args.batch]))
    loops = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
             args.method: SpeculativeGenerator(target, supplier)}
    prompts = harness.fit(harness.encode(tok, harness.load_prompts(args.prompt_set, args.prompts), False), target,
                          args.max_new_tokens)
    batches = harness._batches(prompts, args.batch, tok.pad_token_id, target.device)
    calls = []
    with torch.inference_mode():
        for round_ in range(args.rounds):
            for j, (_, ids, mask) in enumerate(batches):
                order = list(loops) if (round_ + j) % 2 == 0 else list(loops)[::-1]
                for name in order:
                    t0 = time.perf_counter()
                    out = loops[name].generate(ids, attention_mask=mask, max_new_tokens=args.max_new_tokens,
                                               eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
                    wall = time.perf_counter() - t0
                    s = out.stats
                    steps = np.asarray(s.step_seconds)
                    calls.append(dict(run=name, round=round_, batch=j, rows=int(ids.shape[0]), width=int(ids.shape[1]),
                                      wall=wall, prompt_step=float(steps[0]), other_steps=float(steps[1:].sum()),
                                      step_median=float(np.median(steps[1:])) if steps.size > 1 else 0.0,
                                      setup=s.stage_seconds["prefill"], steps=s.steps,
                                      **{k: s.stage_seconds[k] for k in ("propose", "verify", "commit")},
                                      drafted=s.plan.steps_drafted if s.plan is not None else 0))
    summary = []
    for j in range(len(batches)):
        mine = {name: [c for c in calls if c["batch"] == j and c["run"] == name] for name in loops}
        ar, method = mine["ar"], mine[args.method]
        paired = np.array([a["wall"] / m["wall"] for a, m in zip(ar, method)])  # > 1: the method was faster
        row = dict(batch=j, rows=ar[0]["rows"], width=ar[0]["width"], rounds=args.rounds,
                   paired_median=float(np.median(paired)), paired_min=float(paired.min()),
                   paired_max=float(paired.max()), method_won=float((paired >= 1).mean()),
                   drafted=[m["drafted"] for m in method])
        for name, runs in mine.items():
            for part in PARTS:
                v = np.array([c[part] for c in runs])
                row[f"{name}_{part}_min"], row[f"{name}_{part}_median"] = float(v.min()), float(np.median(v))
        summary.append(row)
    lines = [f"# {args.method} vs AR, {args.prompt_set} x {len(prompts)}, batch {args.batch}, {args.rounds} rounds "
             f"alternating; seconds: min / median"]
    for row in summary:
        lines.append(f"batch {row['batch']} ({row['rows']} rows, prompt block {row['width']} wide): AR/method wall "
                     f"paired median {row['paired_median']:.3f} (range {row['paired_min']:.3f}-{row['paired_max']:.3f},"
                     f" method faster in {row['method_won']:.0%} of rounds); drafting steps per call {row['drafted']}")
        for part in PARTS:
            lines.append(f"  {part:12s} ar {row[f'ar_{part}_min']:.4f} / {row[f'ar_{part}_median']:.4f}   "
                         f"{args.method} {row[f'{args.method}_{part}_min']:.4f} / "
                         f"{row[f'{args.method}_{part}_median']:.4f}")
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(json.dumps(dict(environment=provenance(), settings=vars(args) | {"out": str(args.out)},
                                            summary=summary, calls=calls), indent=1))


if __name__ == "__main__":
    main()
