"""Trace SMART's step planner, step by step, beside AR and a static reference on the embedded pair.

    python bench/plan_trace.py --method eagle-smart --batch 1 --device cuda --out trace.txt
    python bench/plan_trace.py --method smart --batch 4 --prompt-set humaneval --repeats 3

Runs AR, the static reference (eagle-smart: the EAGLE head's chain of 4; smart: the draft's 4:2:10 tree)
and the planned method interleaved (`harness.run_interleaved`, best of --repeats), prints their speedups,
then one line per full plan and per step the planner recorded (all rounds, timed and warm-up):

    plan  depth probe warmup drafting | best L(best) C(best)_ms gain realised spread cold backlog cT_ms backoff
          | L(D) for D = 0..max | C(D)_ms for D = 0..max
    step  ms propose_ms verify_ms rest_ms tokens width

`gain` is the best drafting plan's predicted speedup as the decision weighed it (realised rate, spread and
the resume amortisation in); L and C are the planner's predictions (`StepPlanner.predict`). Steps the
planner takes without weighing a plan (plain ones between REPLAN_EVERY plans, c_T probes) print only their
`step` line. The stage
times are the loop's timers: on a GPU they are host time between the loop's syncs.

    python bench/plan_trace.py --out trace.txt --bench -- --prompt-sets humaneval --batch-sizes 4 ...

traces every planner inside a whole `specdec bench` run instead (the arguments after --bench are the
bench's): the lines carry the planner's number (p0, p1, ... in the order the runs built them), and each
`generate` call adds a line as it starts:

    call  batch drafting backoff since_probe realised spread cT_ms
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.planner import StepPlanner

# the static configuration each planned method is read against: the head's chain of 4, the demo's 4:2:10 tree
REFERENCE = {"eagle-smart": ("eagle-chain", dict(eagle_shape=(4, 1, 4))),
             "smart": ("tree", dict(depth=4, topk=2, total_tokens=10))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--method", choices=sorted(REFERENCE), default="eagle-smart")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt-set", default="spec_bench")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--out", type=Path, default=None, help="write the trace here (stdout then gets the summary)")
    ap.add_argument("--bench", action="store_true",
                    help="trace a whole `specdec bench` run with the arguments after `--`")
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    args = ap.parse_args(argv[:split])
    if args.bench:
        return trace_bench(argv[split + 1:], args.out)

    tok = load_tokenizer("demo-target", "--target")
    target = load_model("demo-target", dtype="float32", device=args.device, what="--target")
    head = load_eagle(None, target, "demo-target")
    draft = None if args.method == "eagle-smart" else load_model("demo-draft", dtype="float32", device=args.device,
                                                                 what="--draft")
    cost = smart_profile(None, target, head if args.method == "eagle-smart" else draft, [args.batch])
    prompts = harness.fit(harness.encode(tok, harness.load_prompts(args.prompt_set, args.prompts), False), target,
                          args.max_new_tokens)

    log: list[list] = []
    install(log)
    name, shape = REFERENCE[args.method]
    runs = [harness.Run("ar", harness.make_supplier("ar", None)),
            harness.Run(name, harness.make_supplier(name, draft, eagle=head, **shape)),
            harness.Run(args.method, harness.make_supplier(args.method, draft, cost=cost, eagle=head))]
    res = harness.run_interleaved(target, runs, prompts, batch_size=args.batch, max_new_tokens=args.max_new_tokens,
                                  pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                                  prompt_set=args.prompt_set, repeats=args.repeats)
    ar = res[0][0]
    lines = [f"# {args.method} at batch {args.batch}, {args.prompt_set} x {len(prompts)}, best of {args.repeats}, "
             f"{torch.cuda.get_device_name() if target.device.type == 'cuda' else 'cpu'}"]
    for run, (m, _) in zip(runs, res):
        ratio = m.tokens_per_second / ar.tokens_per_second
        lines.append(f"{run.method:14s} {m.tokens_per_second:8.1f} tok/s  {ratio:.3f}x"
                     f"  accepted {m.mean_accepted_length:.2f}  drafted {m.steps_drafted} plain {m.steps_ar}"
                     f"  stages {m.stage_seconds}")
    lines.append("# plan depth probe warmup drafting | best L C_ms gain realised spread cold backlog cT_ms backoff"
                 " | L(D) | C(D)_ms;  step ms propose_ms verify_ms rest_ms tokens width")
    lines += [" ".join(map(str, e)) for e in log]
    text = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(text)
    sys.stdout.write(text if args.out is None else "\n".join(lines[:4]) + "\n")
    return 0


def install(log: list[list], tagged: bool = False) -> None:
    """Patch StepPlanner so every full plan, step and (tagged) call start appends a line to `log`; tagged:
    each line starts with the planner's number in the order planners were built."""
    orig_init, orig_plan, orig_record, orig_start = (StepPlanner.__init__, StepPlanner.plan, StepPlanner.record,
                                                     StepPlanner.start)
    names: dict[int, str] = {}

    def tag(self) -> list:
        return [names[id(self)]] if tagged else []

    def init(self, *a, **k):
        orig_init(self, *a, **k)
        names[id(self)] = f"p{len(names)}"

    def start(self, cost):
        orig_start(self, cost)
        s = self.state
        if tagged:
            log.append([*tag(self), "call", cost.batch_size, int(s.drafting), s.backoff, s.since_probe,
                        round(s.realised, 3), round(s.spread, 3), round(self.costs.ar(None) * 1e3, 2)])

    def plan(self, backlog=1, context=None, cold=False):
        p = orig_plan(self, backlog, context, cold)
        if p.gain == 0:
            return p  # nothing was weighed (a quiet plain step, a c_T probe): no full plan to print
        s, c = self.state, self.costs
        length, seconds = self.predict(backlog, context)
        best = max((d for d in self.choices if d > 0), key=lambda d: length[d] / seconds[d])
        log.append([*tag(self), "plan", p.depth, int(p.probe), int(p.warmup), int(s.drafting), "|", best,
                    round(float(length[best]), 2), round(float(seconds[best]) * 1e3, 2), round(p.gain, 3),
                    round(s.realised, 3), round(s.spread, 3), int(cold), backlog, round(c.ar(context) * 1e3, 2),
                    s.backoff, "|", *np.round(length, 2).tolist(), "|", *np.round(seconds * 1e3, 2).tolist()])
        return p

    def record(self, step, facts):
        orig_record(self, step, facts)
        log.append([*tag(self), "step", round(step.seconds * 1e3, 2), round(step.propose * 1e3, 2),
                    round(step.verify * 1e3, 2), round((step.filter + step.commit) * 1e3, 2),
                    round(float(np.mean(step.accepted)), 2), step.width])

    StepPlanner.__init__, StepPlanner.plan, StepPlanner.record, StepPlanner.start = init, plan, record, start


def trace_bench(bench_args: list[str], out: Path | None) -> int:
    """Run `specdec bench` with `bench_args` under the trace; write the trace to `out` (or stdout)."""
    from specdec.app import cli

    log: list[list] = []
    install(log, tagged=True)
    status = cli.main(["bench", *bench_args])
    text = "".join(" ".join(map(str, e)) + "\n" for e in log)
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
