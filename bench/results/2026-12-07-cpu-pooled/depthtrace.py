import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
from specdec.estimates import AT_RISK, SURVIVED, BUILT_RISK, BUILT_SURVIVED, CAPPED
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={})
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
orig = pl.StepPlanner.plan
n = [0]
def plan(self, backlog=1, context=None, cold=False):
    p = orig(self, backlog, context, cold)
    if p.gain:
        n[0] += 1
        if n[0] % 6 == 1:
            t = self.depths.table; e = self.depths.estimates()
            print(f"{'DRAFT' if self.state.drafting else 'plain'} g{p.gain:.2f} D{p.depth} | L " + " ".join(f"{x:.2f}" for x in e.length[:7]) + " | rate " + " ".join(f"{x:.2f}" for x in e.rate[1:7]) + " | at_risk " + " ".join(f"{x:.1f}" for x in t[AT_RISK, 1:7]) + " | surv " + " ".join(f"{x:.1f}" for x in t[SURVIVED, 1:7]) + " | capped " + " ".join(f"{x:.1f}" for x in t[CAPPED, 1:7]))
    return p
pl.StepPlanner.plan = plan
for i in range(passes):
    r = harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    print("pass", i, "acc", round(r.mean_accepted_length, 2), r.plan["steps_ar"], r.plan["steps_drafted"])
