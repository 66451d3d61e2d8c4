"""Trace eagle-smart (as on PYTHONPATH) at one batch size: every full plan (gain, c_T, the best depth's L and
C) and every step it then took (plan depth, measured seconds, tokens)."""
import sys, json, numpy as np
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.planner import StepPlanner
b = int(sys.argv[1]); reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(sys.argv[3] if len(sys.argv) > 3 else "humaneval", 16), False), target, 64)
log = []
orig_plan, orig_rec = StepPlanner.plan, StepPlanner.record
def plan(self, backlog=1, context=None, cold=False):
    quiet = self.state.quiet
    p = orig_plan(self, backlog, context, cold)
    s = self.state
    L, C = self.predict(backlog, context)
    usual = self.costs.catch_up(max(1, round(float(L[-1]))))
    extra = max(self.costs.catch_up(backlog) - usual, 0.0) * (1 - 1 / 8)
    D = C - np.where(np.arange(len(C)) > 0, extra, 0.0)
    rate = L / D * C[0]
    best = int(np.argmax(rate[1:])) + 1
    log.append(["plan", p.depth, int(p.probe), int(p.warmup), int(s.drafting), best, round(float(L[best]), 2), round(float(D[best]) * 1e3, 1),
                round(float(rate[best]), 3), round(s.realised, 3), round(s.spread, 3), int(cold), backlog, round(self.costs.ar(context) * 1e3, 2), s.backoff])
    return p
def record(self, step, facts):
    orig_rec(self, step, facts)
    log.append(["rec", round(step.seconds * 1e3, 1), round(float(np.mean(step.accepted)), 2), step.width])
orig_start = StepPlanner.start
def start(self, cost):
    orig_start(self, cost); log.append(["start", cost.batch_size, int(self.state.drafting)])
StepPlanner.plan, StepPlanner.record, StepPlanner.start = plan, record, start
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run("eagle-smart", sup, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method,
                       prompt_set=(sys.argv[3] if len(sys.argv) > 3 else "humaneval"), pad_token_id=tok.pad_token_id, eos_token_id=None)
log.append(["=== timed"])
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=(sys.argv[3] if len(sys.argv) > 3 else "humaneval"), repeats=reps)
ar = res[0][0]
for r, (m, _) in zip(runs, res):
    print(r.method, round(m.tokens_per_second, 1), round(m.tokens_per_second / ar.tokens_per_second, 3), m.steps_drafted, m.steps_ar, m.round_seconds)
print("# plan depth probe warmup drafting best L C_ms rate realised spread cold backlog cT_ms backoff | rec ms tokens width")
for e in log:
    print(*e)
