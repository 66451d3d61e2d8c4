"""Steps per call, rows' mean tokens per step and per-row node counts: the 4:2:8 tree against SMART at fixed caps
(planner=0), passes interleaved. spread = batch progress per step / rows' mean tokens per step."""
import sys, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.generate as gen, specdec.verify as ver
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variants = sys.argv[4:]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
def make(v):
    if v == "ar": return harness.make_supplier("ar", None)
    if v.startswith("eagle:"):
        return harness.make_supplier("eagle", None, eagle=head, eagle_shape=tuple(int(x) for x in v[6:].split(":")))
    return harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(v.split(",", 1)[1]) if "," in v else {})
sups = {v: make(v) for v in ["ar"] + variants}
cur = [None]; rec = collections.defaultdict(list); nodes = collections.defaultdict(list); spreadrows = collections.defaultdict(list)
orig = gen.Stats.record
def record(self, accepted, tree_size, new_tokens, **kw):
    rec[cur[0]].append((len(accepted), float(accepted.mean()), new_tokens))
    return orig(self, accepted, tree_size, new_tokens, **kw)
gen.Stats.record = record
origv = ver.TreeVerifier.verify
def verify(self, tree, cache, **k):
    if tree.size > 1:
        n = tree.num_nodes.cpu().numpy()
        nodes[cur[0]].append((n.min(), n.max(), n.std()))
    return origv(self, tree, cache, **k)
ver.TreeVerifier.verify = verify
def go(v):
    cur[0] = v
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
rec.clear(); nodes.clear()
sec = collections.defaultdict(list)
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        sec[v].append(go(v).seconds)
a = np.array(sec["ar"])
for v in sups:
    R = np.array(rec[v]); steps = len(R) / passes
    rows_mean = R[:, 1].mean(); batch = 64 * 16 / steps  # each pass: 16 prompts x 64 tokens over bs rows a step
    per_step_batch = (64 * 16 / bs) / steps
    nd = np.array(nodes[v]) if nodes[v] else np.zeros((1, 3))
    print(f"{v:38s} speedup {np.median(a / np.array(sec[v])):.3f} steps/pass {steps:.1f} rows' mean {rows_mean:.2f} batch/step {per_step_batch:.2f} "
          f"spread {per_step_batch / rows_mean:.3f} | nodes/row min {nd[:,0].mean():.1f} max {nd[:,1].mean():.1f} std {nd[:,2].mean():.2f}")
