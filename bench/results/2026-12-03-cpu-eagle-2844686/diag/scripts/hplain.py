"""Harness-level: AR, a second AR (control), eagle-smart forced plain; per call wall, stage seconds, step median."""
import sys, time, collections, numpy as np, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.planner import Plan
b = int(sys.argv[1]); reps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
pset = sys.argv[3] if len(sys.argv) > 3 else "humaneval"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)
def forced_plain(sup):
    def plan(*a, _p=sup.planner, **k):
        _p._plan = Plan(0, 1.0, _p.costs.ar(_p.context)); return _p._plan
    sup.planner.plan = plan
    return sup
runs = [harness.Run("ar", harness.make_supplier("ar", None)), harness.Run("ar2", harness.make_supplier("ar", None)),
        harness.Run("smart-plain", forced_plain(harness.make_supplier("eagle-smart", None, cost=cost, eagle=head))),
        harness.Run("smart", harness.make_supplier("eagle-smart", None, cost=cost, eagle=head))]
calls = collections.defaultdict(list)
orig = SpeculativeGenerator.generate
def gen(self, ids, **kw):
    t0 = time.perf_counter(); out = orig(self, ids, **kw); w = time.perf_counter() - t0
    calls[id(self.supplier)].append((ids.shape, w, dict(out.stats.stage_seconds), float(np.median(out.stats.step_seconds)), out.stats.steps, out.stats.plan.steps_drafted if out.stats.plan else None))
    return out
SpeculativeGenerator.generate = gen
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method,
                       prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
calls.clear()
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=pset, repeats=reps)
ar = res[0][0]
for r, (m, out) in zip(runs, res):
    print(f"{r.method:12s} {m.tokens_per_second:7.1f} tok/s {m.tokens_per_second/ar.tokens_per_second:5.3f}x paired {harness.paired_speedup(m, ar) or 1:5.3f} same {out == res[0][1]}")
    print("   rounds", [round(x, 3) for x in (m.round_seconds or [])])
    rows = calls[id(r.supplier)]
    nb = len(rows) // reps
    for j in range(nb):
        rr = rows[j::nb]
        print(f"   batch {j} {tuple(rr[0][0])} steps {rr[0][4]} wall", [round(x[1], 3) for x in rr],
              "step med ms", [round(x[3] * 1e3, 2) for x in rr], "drafted", [x[5] for x in rr])
        print("      stages (median over rounds)", {s: round(float(np.median([x[2][s] for x in rr])), 4) for s in rr[0][2]})
