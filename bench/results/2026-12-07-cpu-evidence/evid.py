"""Fresh planners per pass, the evidence rule on (new) and off (old: EVIDENCE_ROWS = FAR_ROWS = 0, the planner
before 3346789), against AR in the same pass (orders alternate; speedup = AR's seconds over the method's).

    python evid.py SET BATCH PASSES PROMPTS [eagle-smart|smart]
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
NEW = (P.EVIDENCE_ROWS, P.FAR_ROWS)
ar = harness.make_supplier("ar", None)
def go(s, m):
    P.EVIDENCE_ROWS, P.FAR_ROWS = (0, 0) if m == "old" else NEW
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(ar, "ar")
sp = {"old": [], "new": []}; dr = {"old": [], "new": []}
for p in range(passes):
    sups = {"ar": ar, "old": harness.make_supplier(method, draft, cost=cost, eagle=head),
            "new": harness.make_supplier(method, draft, cost=cost, eagle=head)}
    order = ["ar", "old", "new"] if p % 2 == 0 else ["new", "old", "ar"]
    res = {m: go(sups[m], m) for m in order}
    for m in ("old", "new"):
        sp[m].append(res["ar"].seconds / res[m].seconds); dr[m].append((res[m].plan.get("steps_drafted"), res[m].plan.get("probes")))  # (drafting steps, probes)
for m in sp:
    print(method, pset, bs, m, "speedups", np.round(sp[m], 3), "median", round(float(np.median(sp[m])), 3), "drafted", dr[m])
print("new/old per pass", np.round(np.array(sp["new"]) / np.array(sp["old"]), 3), "median", round(float(np.median(np.array(sp["new"]) / np.array(sp["old"]))), 3))
