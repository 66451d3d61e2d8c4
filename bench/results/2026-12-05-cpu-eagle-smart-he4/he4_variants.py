"""he4_paired.py plus a fourth arm, es-flat: EAGLE-3 + SMART whose online verify curve keeps the profile's
shape under the common level (OnlineCosts._refresh with no per-width bucket counted).

    python he4_variants.py ROUNDS OUT.json [BATCH [PROMPT_SET]]
"""
import sys, time, json, numpy as np, torch
from specdec import SpeculativeGenerator
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance
B = int(sys.argv[3]) if len(sys.argv) > 3 else 4; R = int(sys.argv[1]); OUT = sys.argv[2] if len(sys.argv) > 2 and sys.argv[2] != "-" else None
SET = sys.argv[4] if len(sys.argv) > 4 else "humaneval"
import numpy as _np
from specdec import online_costs as oc
_orig_refresh = oc.OnlineCosts._refresh
def _refresh(self):
    if getattr(self, "flat", False):  # the profile's shape under the common level: no per-width correction
        seen = self.verify_seen
        self.verify_seen = _np.zeros_like(seen)
        try:
            _orig_refresh(self)
        finally:
            self.verify_seen = seen
    else:
        _orig_refresh(self)
oc.OnlineCosts._refresh = _refresh
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
loops = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
         "eagle": SpeculativeGenerator(target, harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))),
         "eagle-smart": SpeculativeGenerator(target, harness.make_supplier("eagle-smart", None, eagle=head, cost=smart_profile(None, target, head, [B]))),
         "es-flat": SpeculativeGenerator(target, harness.make_supplier("eagle-smart", None, eagle=head, cost=smart_profile(None, target, head, [B])))}
_p = loops["es-flat"].supplier.planner
_new = _p._new_state
def _flat_state(cost):
    st = _new(cost); st.costs.flat = True; st.costs._stale = True; return st
_p._new_state = _flat_state
prompts = harness.fit(harness.encode(tok, harness.load_prompts(SET, 16), False), target, 64)
batches = harness._batches(prompts, B, tok.pad_token_id, target.device)
calls = []
with torch.inference_mode():
    for r in range(R):
        for j, (_, ids, mask) in enumerate(batches):
            names = list(loops); k = (r + j) % len(names); names = names[k:] + names[:k]
            for n in names:
                t0 = time.perf_counter()
                out = loops[n].generate(ids, attention_mask=mask, max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
                wall = time.perf_counter() - t0
                s = out.stats; steps = np.asarray(s.step_seconds)
                calls.append(dict(run=n, round=r, batch=j, wall=wall, steps=s.steps, step_median=float(np.median(steps[1:])),
                                  prompt_step=float(steps[0]), drafted=s.plan.steps_drafted if s.plan else None,
                                  predicted=s.plan.predicted_speedup if s.plan else None))
            row = {c["run"]: c for c in calls[-len(loops):]}
            print(f"round {r} batch {j}: AR {row['ar']['wall']:.3f} s (step {row['ar']['step_median']*1e3:.1f} ms) | eagle x{row['ar']['wall']/row['eagle']['wall']:.3f} " + " ".join(f"| {n} x{row['ar']['wall']/row[n]['wall']:.3f} {row[n]['drafted']}/{row[n]['steps']}" for n in ("eagle-smart", "es-flat")), flush=True)
for n in ("eagle", "eagle-smart", "es-flat"):
    ratios = [a["wall"] / m["wall"] for a, m in zip([c for c in calls if c["run"] == "ar"], [c for c in calls if c["run"] == n])]
    tot = sum(c["wall"] for c in calls if c["run"] == "ar") / sum(c["wall"] for c in calls if c["run"] == n)
    print(f"{n}: paired median x{np.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); total-time ratio x{tot:.3f}")
if OUT:
    json.dump(dict(environment=provenance(), batch=B, rounds=R, calls=calls), open(OUT, "w"), indent=1)
