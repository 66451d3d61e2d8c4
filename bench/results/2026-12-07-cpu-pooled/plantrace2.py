import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(sys.argv[4]) if len(sys.argv) > 4 else {})
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
log = []
orig = pl.StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    p = orig(self, backlog, context, cold)
    if p.gain:
        L, C = self.predict(backlog, context)
        c = self.costs
        usual = c.catch_up(max(1, round(float(L[-1]))))
        extra = max(c.catch_up(backlog) - usual, 0.0)
        D = max(range(1, len(L)), key=lambda d: L[d] / (C[d] - extra * 7 / 8))
        log.append(f"{'D' if self.state.drafting else 'p'} b{backlog}{'c' if cold else ''} g{p.gain:.2f} L{L[D]:.2f} C{C[D]*1e3:.1f} x{extra*1e3:.1f} cu{c.catch_up(backlog)*1e3:.1f} ar{C[0]*1e3:.2f} r{self.state.realised:.2f} s{self.state.spread:.2f} D{D}")
    return p
pl.StepPlanner.plan = plan
for i in range(passes):
    log.clear()
    r = harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    print("pass", i, "acc", round(r.mean_accepted_length, 2), r.plan["steps_ar"], r.plan["steps_drafted"])
    print(" | ".join(log))
