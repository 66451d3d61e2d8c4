"""Interleaved A/B at one batch size: eagle 4:2:8, eagle-smart default, eagle-smart variants."""
import sys, json
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.planner import StepPlanner
b = int(sys.argv[1]); variants = sys.argv[2].split(","); reps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
pset = sys.argv[4] if len(sys.argv) > 4 else "humaneval"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)
orig = StepPlanner.frontier_width
class Force(StepPlanner):
    def frontier_width(self, *a):
        return max(orig(self, *a), 1)
class Force2(StepPlanner):
    def frontier_width(self, bounds, *a):
        return min(max(orig(self, bounds, *a), 2), len(bounds))
runs = [harness.Run("ar", harness.make_supplier("ar", None), None)]
for v in variants:
    if v.startswith("eagle-"):
        d, k, n = map(int, v[6:].split("x"))
        s = harness.make_supplier("eagle", None, eagle=head, eagle_shape=(d, k, n))
    else:
        opts = json.loads(v.split(":", 1)[1]) if ":" in v else {}
        force = opts.pop("force", False); force2 = opts.pop("force2", False); plain = opts.pop("plain", False)
        s = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=opts)
        if force:
            s.planner.__class__ = Force
        if force2:
            s.planner.__class__ = Force2
        if plain:
            from specdec.planner import Plan
            def _plain(*a, _p=s.planner, _o=s.planner.plan, **k):
                p = _o(*a, **k)
                if p.depth:
                    p = _p._plan = Plan(0, 1.0, _p.costs.ar(_p.context), p.probe)
                return p
            s.planner.plan = _plain
    runs.append(harness.Run(v, s, None))
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method,
                       prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=pset, repeats=reps)
ar = res[0][0]
for r, (m, out) in zip(runs, res):
    st = m.stage_seconds if isinstance(m.stage_seconds, dict) else json.loads(m.stage_seconds or "{}")
    print(f"{r.method:40s} {m.tokens_per_second:7.1f} tok/s {m.tokens_per_second/ar.tokens_per_second:5.2f}x paired {harness.paired_speedup(m, ar) or 1:5.2f} "
          f"acc {m.mean_accepted_length:4.2f} tree {m.mean_tree_size:4.1f} prop {st.get('propose',0):.3f} ver {st.get('verify',0):.3f} "
          f"drafted {m.steps_drafted} plain {m.steps_ar} same {out == res[0][1]}")
for r, (m, out) in zip(runs, res):
    print(r.method, "rounds", [round(x, 3) for x in (m.round_seconds or [])], "by round", m.speedup_by_round, "batch_drafted", m.batch_drafted)
import numpy as np
for r in runs:
    p = getattr(r.supplier, "planner", None)
    if p is None or p.state is None:
        continue
    L, C = p.predict(4, p.context)
    e = p.depths.estimates()
    np.set_printoptions(precision=3, suppress=True, linewidth=200)
    print(r.method, "c_T %.2f ms realised %.3f spread %.3f drafting %s" % (p.costs.ar(p.context) * 1e3, p.state.realised, p.state.spread, p.state.drafting))
    print("  L(D)   ", np.asarray(L)[:10]); print("  C(D) ms", np.asarray(C)[:10] * 1e3); print("  rate x c_T", (np.asarray(L) / np.asarray(C) * p.costs.ar(p.context))[:10])
    print("  forwards", np.asarray(e.forwards)[:10]); print("  width  ", np.asarray(e.width)[:10])
    print("  layer %.2f ms catch_up(4) %.2f ms rest %.2f, layer_factor %.2f catch_factor %.2f" % (p.costs.layer(e.layer_width)*1e3, p.costs.catch_up(4)*1e3, p.costs.rest*1e3, p.costs.layer_factor, p.costs.catch_factor))
