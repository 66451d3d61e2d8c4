"""The prompt step at batch 16 with and without feature capture: its parts (model forward, features cat, gather)."""
import sys, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.base import ARSupplier
import specdec.attention as att, specdec.verify as ver
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
class ARFeat(ARSupplier):
    def feature_layers(self): return head.feature_layers
sup = {"ar": harness.make_supplier("ar", None), "ar_feat": ARFeat()}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(list); cur = [None]; first = [True]
def wrap(obj, name, label):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if first[0]: T[(cur[0], label)].append(time.perf_counter() - t)
        return r
    setattr(obj, name, g)
wrap(att, "_model_call", "model_call")
wrap(att.FeatureCapture, "features", "features_cat")
wrap(ver, "_with_features", "with_features")
wrap(ver.TreeVerifier, "_accept", "accept")
wrap(ver.TreeVerifier, "verify", "verify")
origv = ver.TreeVerifier.verify
def v2(self, tree, cache, **k):
    first[0] = k.get("prompt") is not None
    return origv(self, tree, cache, **k)
ver.TreeVerifier.verify = v2
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=8, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup: go(m)
T.clear()
for r in range(rounds):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]): go(m)
for m in sup:
    print(m, {lab: f"{np.median(v)*1e3:.2f} ms" for (mm, lab), v in T.items() if mm == m})
