"""A planned supplier with a fresh planner per pass against AR in the same pass (AR first or second alternately).

    [PSET=humaneval|spec_bench] python warm.py BATCH PASSES PROMPTS [eagle-smart|smart]

Run for this folder with a temporary switch in planner.py (EXP_WARMUP_CAP=deepest|best, the warm-up probes'
cap); the committed planner is "best", so the label it prints is only the environment's.
"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
bs, passes, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]); method = sys.argv[4] if len(sys.argv) > 4 else "eagle-smart"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft") if method == "smart" else None
cost = smart_profile(None, target, draft if method == "smart" else head, [1, 4])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(os.environ.get("PSET", "humaneval"), 16), False), target, 64)[:n]
ar = harness.make_supplier("ar", None)
def go(s, m):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=os.environ.get("PSET", "humaneval"),
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(ar, "ar")
sp = []; drafted = []
for p in range(passes):
    es = harness.make_supplier(method, draft, cost=cost, eagle=head)
    if p % 2 == 0:
        a = go(ar, "ar"); e = go(es, "es")
    else:
        e = go(es, "es"); a = go(ar, "ar")
    sp.append(a.seconds / e.seconds); drafted.append(e.plan.get("steps_drafted") if e.plan else None)
print(method, bs, n, os.environ.get("EXP_WARMUP_CAP", "deepest"), "speedups", np.round(sp, 3), "median", round(float(np.median(sp)), 3), "drafted", drafted)
