"""c_T check: the planner's c_T over a run vs AR's measured step seconds, interleaved, one batch size."""
import sys, json, numpy as np
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.estimates import OnlineCosts
from specdec.suppliers import ARSupplier
b = int(sys.argv[1]); which = sys.argv[2] if len(sys.argv) > 2 else "eagle-smart"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
head = load_eagle(None, target, "demo-target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
cost = smart_profile(None, target, head if which == "eagle-smart" else draft, [1, 4, 8, 16])
ar_steps, obs = [], []
ctx = [0.0]
_prop = ARSupplier.propose
def _p(self, state):
    ctx[0] = float((state.history_len - state.host_start).max())
    return _prop(self, state)
ARSupplier.propose = _p
cm = {}
def _rec(self, step):
    m = cm.setdefault(step.batch_size if hasattr(step, "batch_size") else b, None)
    ar_steps.append((step.seconds, step.verify, step.propose + step.commit + step.filter, ctx[0]))
ARSupplier.record_step = _rec
orig = OnlineCosts.observe_ar
RUN = {}
def observe_ar(self, step, context, warm):
    orig(self, step, context, warm)
    obs.append((step.seconds, warm, self.model.context_factor(context), self.ar_step, step.verify, RUN.get("p").state.plain_run if RUN.get("p") else -1))
OnlineCosts.observe_ar = observe_ar
sup = harness.make_supplier(which, draft, cost=cost, eagle=head)
RUN["p"] = sup.planner
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run(which, sup, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method,
                       prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
ar_steps.clear(); obs.clear()
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=3)
a = np.array(ar_steps)
from specdec.cost import CostModel
model = CostModel.fit(cost, b)
fac = np.array([model.context_factor(x) for x in a[:, 3]])
print(f"AR normalised by context factor: {np.mean(a[:,0]/fac)*1e3:.2f} ms (factor mean {fac.mean():.3f}); profile ar_step at b: {model.ar_step*1e3:.2f} ms")
print(f"b={b} AR steps {len(a)}: mean {a[:,0].mean()*1e3:.2f} ms (verify {a[:,1].mean()*1e3:.2f}, rest {a[:,2].mean()*1e3:.3f}) median {np.median(a[:,0])*1e3:.2f}")
o = np.array(obs) if obs else np.zeros((0, 5))
w = o[o[:, 1] == 1] if len(o) else o
c = o[o[:, 1] == 0] if len(o) else o
print(f"profile c_T {cost.ar_step_seconds if hasattr(cost,'ar_step_seconds') else '?'}")
if len(w): print(f"{which} warm plain steps {len(w)}: mean {w[:,0].mean()*1e3:.2f} ms (verify {w[:,4].mean()*1e3:.2f}), per-context-factor {np.mean(w[:,0]/w[:,2])*1e3:.2f}; ctx factor mean {w[:,2].mean():.3f}; final ar_step {o[-1,3]*1e3:.2f}")
if len(c): print(f"{which} cold plain steps {len(c)}: mean {c[:,0].mean()*1e3:.2f} ms (verify {c[:,4].mean()*1e3:.2f})")
for r, (m, _) in zip(runs, res):
    print(r.method, round(m.tokens_per_second, 1), m.steps_drafted, m.steps_ar)
bins = np.percentile(a[:, 3], [0, 20, 40, 60, 80, 100])
for lo, hi in zip(bins[:-1], bins[1:]):
    sel = (a[:, 3] >= lo) & (a[:, 3] <= hi)
    print(f"ctx {lo:6.0f}-{hi:6.0f}: AR step {np.median(a[sel,0])*1e3:6.2f} ms (n={sel.sum()}), context_factor {model.context_factor((lo+hi)/2):.3f}")

o = np.array(obs)
print("plain_run at observation (steps plain before this one) -> seconds normalised by context factor")
for lo, hi in [(0,0),(1,1),(2,2),(3,3),(4,4),(5,8),(9,16),(17,10000)]:
    sel = (o[:,5] >= lo) & (o[:,5] <= hi)
    if sel.any(): print(f"  run {lo}-{hi}: n={sel.sum():4d} mean {np.mean(o[sel,0]/o[sel,2])*1e3:6.2f} median {np.median(o[sel,0]/o[sel,2])*1e3:6.2f} ms")
print("AR normalised median", np.median(a[:,0]/fac)*1e3)
print("ar_step trajectory (ms):", np.round(o[::10,3]*1e3, 2).tolist())
