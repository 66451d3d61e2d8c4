"""A long catch-up amortised over the call's drafting steps left (new) or over RESUME_HORIZON = 8 steps (old: the
planner is not told the tokens to go, as before), planners kept across passes (as in `specdec bench`), each
against AR in the same pass (orders alternate; speedup = AR's seconds over the method's).

    python horizon.py SET BATCH PASSES PROMPTS [eagle-smart|smart]
"""
import sys, numpy as np
import specdec.planner as P
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
method = sys.argv[5] if len(sys.argv) > 5 else "eagle-smart"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft") if method == "smart" else None
cost = smart_profile(None, target, draft if method == "smart" else head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
real, old = P.StepPlanner.plan, [False]
def plan(self, backlog=1, context=None, cold=False, remaining=None):
    return real(self, backlog, context, cold, None if old[0] else remaining)
P.StepPlanner.plan = plan
sups = {"ar": harness.make_supplier("ar", None), "static": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)), "old": harness.make_supplier(method, draft, cost=cost, eagle=head),
        "new": harness.make_supplier(method, draft, cost=cost, eagle=head)}
def go(m):
    old[0] = m == "old"
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sups:
    go(m)  # each planner's first run: warm-up, first c_T measurement
sp = {"old": [], "new": [], "static": []}; steps = {"old": [], "new": []}
for p in range(passes):
    order = ["ar", "static", "old", "new"] if p % 2 == 0 else ["new", "old", "static", "ar"]
    res = {m: go(m) for m in order}
    sp["static"].append(res["ar"].seconds / res["static"].seconds)
    for m in ("old", "new"):
        sp[m].append(res["ar"].seconds / res[m].seconds)
        steps[m].append((res[m].plan.get("steps_drafted"), res[m].plan.get("steps_ar")))
for m in sp:
    print(method, pset, bs, m, "speedups", np.round(sp[m], 3), "median", round(float(np.median(sp[m])), 3),
          "(drafting, plain) steps", steps.get(m))
r = np.array(sp["new"]) / np.array(sp["old"])
print("new/old per pass", np.round(r, 3), "median", round(float(np.median(r)), 3))
