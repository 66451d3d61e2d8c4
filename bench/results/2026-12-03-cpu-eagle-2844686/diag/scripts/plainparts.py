"""Which part of a plain EAGLE + SMART call costs more than AR: cache capacity, feature capture, the supplier."""
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
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:b]
_, ids, mask = harness._batches(prompts, b, tok.pad_token_id, target.device)[0]
def forced_plain(sup):
    def plan(*a, _p=sup.planner, **k):
        _p._plan = Plan(0, 1.0, _p.costs.ar(_p.context)); return _p._plan
    sup.planner.plan = plan
    return sup
smart = forced_plain(harness.make_supplier("eagle-smart", None, cost=cost, eagle=head))
print("eagle-smart max_tree_size", smart.max_tree_size(), "feature layers", smart.feature_layers())
ar_cap = harness.make_supplier("ar", None); ar_cap.max_tree_size = smart.max_tree_size
gens = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
        "ar-cap": SpeculativeGenerator(target, ar_cap),
        "ar-feat": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
        "smart-plain": SpeculativeGenerator(target, smart)}
gens["ar-feat"].verifier.request_features(smart.feature_layers())
res = collections.defaultdict(list)
import gc, os
if os.environ.get("GCFREEZE"): gc.collect(); gc.freeze(); print("gc frozen", gc.get_freeze_count())
gcs = []
gc.callbacks.append(lambda phase, info: gcs.append((phase, info["generation"], time.perf_counter())))
with torch.inference_mode():
    for g in gens.values():
        g.generate(ids, attention_mask=mask, max_new_tokens=4, pad_token_id=tok.pad_token_id)
    for r in range(reps):
        names = list(gens); k0 = r % len(names); names = names[k0:] + names[:k0]
        for k in names:
            t0 = time.perf_counter()
            out = gens[k].generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                                   eos_token_id=tok.eos_token_id)
            t1 = time.perf_counter()
            g2 = [(p, gen, t) for p, gen, t in gcs if t0 <= t <= t1]
            pause = sum(b[2] - a[2] for a, b in zip(g2, g2[1:]) if a[0] == "start" and b[0] == "stop")
            full = sum(1 for p, gen, t in g2 if p == "start" and gen == 2)
            st = np.array(out.stats.step_seconds)
            res[k].append((t1 - t0, dict(out.stats.stage_seconds), float(np.median(st)), pause, full, float((st - np.median(st)).clip(min=0).sum())))
ar = np.array([x[0] for x in res["ar"]])
for k, rows in res.items():
    w = np.array([x[0] for x in rows])
    print(f"{k:12s} wall min {w.min():.3f} med {np.median(w):.3f} step med {np.median([x[2] for x in rows])*1e3:.2f} ms"
          f" paired AR/k median {np.median(ar / w):.3f} gc pause med {np.median([x[3] for x in rows])*1e3:.1f} ms gen2/call {np.mean([x[4] for x in rows]):.1f} excess med {np.median([x[5] for x in rows])*1e3:.0f} ms stages", {s: round(float(np.median([x[1][s] for x in rows])), 4) for s in rows[0][1]})
