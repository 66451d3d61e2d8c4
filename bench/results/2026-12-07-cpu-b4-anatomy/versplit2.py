"""The verify stage's parts per steady step: the 4:2:8 tree against SMART at a fixed cap (planner=0)."""
import sys, time, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.attention as att, specdec.verify as ver, specdec.cache as cch, specdec.tree as tr
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variants = sys.argv[4:]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
def make(v):
    if v.startswith("eagle:"):
        return harness.make_supplier("eagle", None, eagle=head, eagle_shape=tuple(int(x) for x in v[6:].split(":")))
    return harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(v.split(",", 1)[1]))
sup = {v: make(v) for v in variants}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(float); N = collections.defaultdict(int); cur = [None]; on = [False]; W = collections.defaultdict(list)
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if on[0]: T[(cur[0], label)] += time.perf_counter() - t; N[(cur[0], label)] += 1
        return r
    setattr(obj, name, g)
wrap(att, "_model_call", "model_call")
wrap(att.TreeAttentionMetadata, "build", "meta_build")
wrap(ver.TreeVerifier, "_accept", "accept")
wrap(cch.TreeCache, "commit", "cache_commit")
wrap(tr.TreeBatch, "positions", "positions")
origv = ver.TreeVerifier.verify
def v2(self, tree, cache, **k):
    on[0] = k.get("prompt") is None and tree.size > 1
    if on[0]: W[cur[0]].append(tree.size)
    t = time.perf_counter(); r = origv(self, tree, cache, **k)
    if on[0]: T[(cur[0], "verify")] += time.perf_counter() - t; N[(cur[0], "verify")] += 1
    on[0] = False
    return r
ver.TreeVerifier.verify = v2
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup: go(m)
T.clear(); N.clear(); W.clear()
for r in range(rounds):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        go(m)
for m in sup:
    n = N[(m, "verify")]
    w = np.array(W[m])
    print(m, "tree steps", n // rounds, "width mean", round(w.mean(), 2), "hist", np.bincount(w).tolist(), {lab: f"{T[(mm, lab)] / n * 1e3:.3f}" for (mm, lab) in T if mm == m}, "ms/step")
