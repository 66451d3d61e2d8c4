"""Steady tree steps at batch B: the verify stage's parts (medians per step, after the prompt step)."""
import sys, time, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
import specdec.attention as att, specdec.verify as ver, specdec.cache as cch, specdec.generate as gen
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shape = tuple(int(x) for x in sys.argv[4].split(":")) if len(sys.argv) > 4 else (4, 2, 8)
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
sup = {"ar": harness.make_supplier("ar", None), "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=shape)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(float); N = collections.defaultdict(int); cur = [None]; on = [False]
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if on[0]: T[(cur[0], label)] += time.perf_counter() - t; N[(cur[0], label)] += 1
        return r
    setattr(obj, name, g)
wrap(att, "_model_call", "model_call")
wrap(att, "tree_forward", "tree_forward")
wrap(att.TreeAttentionMetadata, "build", "meta_build")
wrap(att.FeatureCapture, "features", "features_cat")
wrap(ver, "_with_features", "with_features")
wrap(ver.TreeVerifier, "_accept", "accept")
wrap(cch.TreeCache, "commit", "cache_commit")
origv = ver.TreeVerifier.verify
def v2(self, tree, cache, **k):
    on[0] = k.get("prompt") is None
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
T.clear(); N.clear()
stage = collections.defaultdict(float)
for r in range(rounds):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        res = go(m)
        for k, v in res.stage_seconds.items(): stage[(m, k)] += v
for m in sup:
    n = N[(m, "verify")]
    print(m, "steps", n // rounds, {lab: f"{T[(mm, lab)] / n * 1e3:.3f}" for (mm, lab) in T if mm == m}, "ms/step")
    print(m, "stages ms/step", {k: round(stage[(mm, k)] / n * 1e3, 3) for (mm, k) in stage if mm == m})
