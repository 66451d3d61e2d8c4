"""EAGLE-3 + SMART with the c_T re-measure stretched (new: C_T_STRETCH = 4) and not (old: 1), each planner kept
across passes (as in `specdec bench`), against AR in the same pass (orders alternate; speedup = AR's seconds over
the method's). Each pass is one run of PROMPTS prompts.

    python stretch.py SET BATCH PASSES PROMPTS
"""
import sys, numpy as np
import specdec.planner as P
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
NEW = P.C_T_STRETCH
sups = {"ar": harness.make_supplier("ar", None), "old": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head),
        "new": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)}
def go(m):
    P.C_T_STRETCH = 1 if m == "old" else NEW
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sups:
    go(m)  # each planner's first run: warm-up, first c_T measurement
sp = {"old": [], "new": []}; plain = {"old": [], "new": []}
for p in range(passes):
    order = ["ar", "old", "new"] if p % 2 == 0 else ["new", "old", "ar"]
    res = {m: go(m) for m in order}
    for m in ("old", "new"):
        sp[m].append(res["ar"].seconds / res[m].seconds); plain[m].append(res[m].plan.get("steps_ar"))
for m in sp:
    print(pset, bs, m, "speedups", np.round(sp[m], 3), "median", round(float(np.median(sp[m])), 3), "plain steps", plain[m])
r = np.array(sp["new"]) / np.array(sp["old"])
print("new/old per pass", np.round(r, 3), "median", round(float(np.median(r)), 3))
