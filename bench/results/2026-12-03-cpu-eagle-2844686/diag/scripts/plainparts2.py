"""Per-step cost of EAGLE + SMART's plain steps against AR's, part by part, alternating generate calls on one batch:
ar, ar-feat (AR with the verifier capturing the head's features), smart-plain (forced plain), smart-plain-nochunks
(forced plain whose runner keeps no feature chunks: what retaining them costs)."""
import sys, time, numpy as np, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.planner import Plan
b = int(sys.argv[1]); reps = int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:b]
_, ids, mask = harness._batches(prompts, b, tok.pad_token_id, target.device)[0]
def forced_plain(sup):
    def plan(*a, _p=sup.planner, **k):
        _p._plan = Plan(0, 1.0, _p.costs.ar(_p.context)); return _p._plan
    sup.planner.plan = plan
    return sup
plain = forced_plain(harness.make_supplier("eagle-smart", None, cost=cost, eagle=head))
bare = forced_plain(harness.make_supplier("eagle-smart", None, cost=cost, eagle=head))
def commit(acc, _r=bare.runner):
    _r.cache.rollback(); _r.backlog += acc.host_num_accepted + 1
bare.runner.commit = commit
gens = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
        "ar-feat": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
        "smart-plain": SpeculativeGenerator(target, plain),
        "smart-plain-nochunks": SpeculativeGenerator(target, bare)}
gens["ar-feat"].verifier.request_features(plain.feature_layers())
names = list(gens)
med = {k: [] for k in gens}; st = {k: [] for k in gens}; wall = {k: [] for k in gens}
with torch.inference_mode():
    for r in range(reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for k in order:
            t0 = time.perf_counter()
            out = gens[k].generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
            wall[k].append(time.perf_counter() - t0)
            med[k].append(np.median(out.stats.step_seconds[1:])); st[k].append(dict(out.stats.stage_seconds))
for k in gens:
    print(f"{k:22s} step median {np.median(med[k])*1e3:.2f} ms paired {np.median(np.array(med[k]) / np.array(med['ar'])):.3f}"
          f"  wall paired {np.median(np.array(wall[k]) / np.array(wall['ar'])):.3f}  stage ms/call",
          {s: round(float(np.median([x[s] for x in st[k]])) * 1e3, 1) for s in st[k][0]})
