"""AR with and without the head's feature capture at batch 16: verify per step (prompt step apart), interleaved."""
import sys, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.base import ARSupplier
import specdec.verify as ver
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
class ARFeat(ARSupplier):
    def feature_layers(self): return head.feature_layers
sup = {"ar": harness.make_supplier("ar", None), "ar_feat": ARFeat()}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(list); cur = [None]
origv = ver.TreeVerifier.verify
def v2(self, tree, cache, **k):
    t = time.perf_counter(); r = origv(self, tree, cache, **k)
    T[(cur[0], "prompt" if k.get("prompt") is not None else "step")].append(time.perf_counter() - t)
    return r
ver.TreeVerifier.verify = v2
runs = collections.defaultdict(list)
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup: go(m)
T.clear()
for r in range(rounds):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        runs[m].append(go(m).seconds)
for m in sup:
    print(m, f"run median {np.median(runs[m])*1e3:.1f} ms", f"prompt step median {np.median(T[(m,'prompt')])*1e3:.2f} ms",
          f"other steps median {np.median(T[(m,'step')])*1e3:.3f} ms (n={len(T[(m,'step')])})")
