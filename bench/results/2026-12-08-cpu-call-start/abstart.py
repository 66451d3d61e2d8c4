"""A/B of a call's first plan: "new" (a full plan at each call's first plannable step, as committed) against "old"
(the quiet stretch left by the last call runs on: start() wrapped to restore min(quiet, 7)). Demo-like cells: per
pass fresh suppliers, a 4-token warm-up call each, then the 64-token call of every prompt against AR, order
rotated.  usage: abstart.py BATCH PASSES METHOD   (PSET, N prompts)"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec import planner as P
bs, passes, method = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
PSET = os.environ.get("PSET", "humaneval"); N = int(os.environ.get("N", 4))
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft") if method == "smart" else None
cost = smart_profile(None, target, draft if method == "smart" else head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(PSET, max(N, 4)), False), target, 64)[:N]
orig_start = P.StepPlanner.start
def old_start(self, cost):
    st = self._batches.get(cost.batch_size)
    q = st.quiet if st is not None else 0
    orig_start(self, cost)
    self.state.quiet = min(q, P.REPLAN_EVERY - 1)
def go(s, n=64):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=n, method="x", prompt_set=PSET,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
ar = harness.make_supplier("ar", None); go(ar)
res = {"new": [], "old": []}; drafted = {"new": [], "old": []}
for p in range(passes):
    sups = {k: harness.make_supplier(method, draft, cost=cost, eagle=head) for k in ("new", "old")}
    sups["old"].planner.start = old_start.__get__(sups["old"].planner)
    for k in sups: go(sups[k], 4)
    order = ["ar", "new", "old"]; order = order[p % 3:] + order[:p % 3]
    t = {}
    for k in order:
        r = go(ar if k == "ar" else sups[k]); t[k] = r.seconds
        if k != "ar": drafted[k].append(r.steps_drafted)
    for k in res: res[k].append(t["ar"] / t[k])
    print(f"pass {p}: new {res['new'][-1]:.3f} ({drafted['new'][-1]}) old {res['old'][-1]:.3f} ({drafted['old'][-1]})", flush=True)
print(f"{method} b{bs} {PSET} N{N}: median new {np.median(res['new']):.3f} old {np.median(res['old']):.3f}; mean new {np.mean(res['new']):.3f} old {np.mean(res['old']):.3f}; new/old paired median {np.median(np.array(res['new'])/np.array(res['old'])):.3f}")
