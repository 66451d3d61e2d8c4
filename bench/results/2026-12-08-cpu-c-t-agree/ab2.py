"""One-process A/B: AR, the head's 4:2:8 tree, EAGLE-3 + SMART "a" (as committed) and "b" (planner module constants
patched around its runs: B="C_T_EVERY=128", only constants read while planning: MARGIN is read at construction,
so B="MARGIN=..." leaves b the same planner as a, an A/A; OLDSTART=1: b keeps the last call's quiet stretch;
BSMART= smart variant; DRAFT=1: SMART over the draft model,
tree = the draft's 4:2:10), same suppliers through the batch sizes in order, ROUNDS interleaved rounds (order
reversed every other round). usage: ab2.py SET BATCHES ROUNDS"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec import planner as P
pset, batches, rounds = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
patch = {k: float(v) if "." in v else int(v) for k, v in (x.split("=") for x in os.environ.get("B", "").split(",") if x)}
use_draft = os.environ.get("DRAFT") == "1"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft") if use_draft else None
cost = smart_profile(None, target, draft if use_draft else head, [1, 4, 8, 16])
method = "smart" if use_draft else "eagle-smart"
sups = {"ar": harness.make_supplier("ar", None),
        "tree": (harness.make_supplier("tree", draft, depth=4, topk=2, total_tokens=10) if use_draft else
                 harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))),
        "a": harness.make_supplier(method, draft, cost=cost, eagle=head),
        "b": harness.make_supplier(method, draft, cost=cost, eagle=head, smart=harness.smart_variant(os.environ.get("BSMART", "default")))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
saved = {k: getattr(P, k) for k in patch}
if os.environ.get("OLDCT") == "1":  # "b": c_T re-measured every C_T_EVERY (x C_T_STRETCH) however it agreed
    def old_c_t_every(self, gain):
        if not self.costs.ar_seen:
            return P.WARMUP
        sure = gain * (1 - P.C_T_DOUBT) > 1 + self.margin / 2
        return P.C_T_EVERY * (P.C_T_STRETCH if sure else 1)
    sups["b"].planner._c_t_every = old_c_t_every.__get__(sups["b"].planner)
if os.environ.get("OLDSTART") == "1":  # "b": the quiet stretch left by the last call runs on into the next
    orig_start = P.StepPlanner.start
    def old_start(self, cost):
        st = self._batches.get(cost.batch_size)
        q = st.quiet if st is not None else 0
        orig_start(self, cost)
        self.state.quiet = min(q, P.REPLAN_EVERY - 1)
    sups["b"].planner.start = old_start.__get__(sups["b"].planner)
print("patch", patch, "bsmart", os.environ.get("BSMART", "default"), flush=True)
for bs in batches:
    res = {k: [] for k in sups}
    for r in range(rounds):
        names = list(sups) if r % 2 == 0 else list(sups)[::-1]
        for name in names:
            if name == "b":
                for k, v in patch.items(): setattr(P, k, v)
            out, toks = harness.run_method(target, sups[name], prompts, batch_size=bs, max_new_tokens=64, method=name, prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
            for k, v in saved.items(): setattr(P, k, v)
            res[name].append((out.seconds, out.mean_accepted_length, out.plan["steps_drafted"] if out.plan else 0, out.plan["steps_ar"] if out.plan else 0))
    ar = np.array([x[0] for x in res["ar"]])
    line = [f"{pset} b{bs}"]
    for name in sups:
        s = np.array([x[0] for x in res[name]])
        line.append(f"{name} {np.median(ar / s):.3f}/{ar.min() / s.min():.3f} acc {np.mean([x[1] for x in res[name]]):.2f} dr {sum(x[2] for x in res[name])} pl {sum(x[3] for x in res[name])}")
    print(" | ".join(line), flush=True)
