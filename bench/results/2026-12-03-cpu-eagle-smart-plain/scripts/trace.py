"""Trace the planner's draft/plain decisions of eagle-smart at one batch size over an interleaved run."""
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
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
log = []
orig = StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    p = orig(self, backlog, context, cold)
    s = self.state
    L, C = self.predict(backlog, context)
    rate = L / C * C[0]
    best = int(np.argmax(rate[1:])) + 1
    log.append(dict(d=p.depth, probe=p.probe, drafting=s.drafting, best=best, pred=round(float(rate[best]), 3),
                    gain=round(float(rate[best] * s.realised * s.spread), 3), real=round(s.realised, 3), spread=round(s.spread, 3),
                    backoff=s.backoff, cold=cold, backlog=backlog, cT=round(self.costs.ar(context) * 1e3, 2)))
    return p
StepPlanner.plan = plan
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run("eagle-4x2x8", harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)), None), harness.Run("eagle-smart", sup, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method,
                       prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=reps)
ar = res[0][0]
for r, (m, _) in zip(runs, res):
    print(r.method, round(m.tokens_per_second, 1), round(m.tokens_per_second / ar.tokens_per_second, 3), m.steps_drafted, m.steps_ar, m.batch_drafted if hasattr(m, "batch_drafted") else "")
# compress the log: runs of identical (d>0, probe, drafting)
prev, n = None, 0
for e in log:
    key = (e["d"] > 0, e["probe"], e["drafting"])
    if key != prev or e["probe"]:
        print(json.dumps(e, default=str))
    prev = key
