"""verify() of a root-only tree at batch B: features on vs off, interleaved blocks."""
import sys, time, torch, numpy as np
from specdec.app.models import load_model
from specdec.verify import TreeVerifier
from specdec.suppliers.base import root_only
from specdec.app.evaluation import load_eagle
bs = int(sys.argv[1])
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
ver = TreeVerifier(target)
layers = load_eagle(None, target, "demo-target").feature_layers
print("layers", layers)
torch.manual_seed(0)
def run(feat, steps=64, ctx=200, capacity=600):
    ver.request_features(layers if feat else ())
    cache = ver.new_cache(bs, capacity)
    ids = torch.randint(0, 1000, (bs, ctx))
    ver.prefill(cache, ids, torch.zeros(bs, dtype=torch.int64))
    root = torch.randint(0, 1000, (bs,))
    ts = []
    for _ in range(steps):
        t = time.perf_counter()
        acc = ver.verify(root_only(root), cache, validate=False)
        ts.append(time.perf_counter() - t)
        root = acc.host_tokens[:, 0] if hasattr(acc, 'host_tokens') else root
        root = torch.as_tensor(np.asarray(root)).reshape(bs)
    return float(np.median(ts))
for f in (0, 1, 0, 1): run(f)
res = {0: [], 1: []}
for r in range(10):
    for f in ((0, 1) if r % 2 == 0 else (1, 0)):
        res[f].append(run(f))
for f in res: print("features" if f else "plain   ", round(np.median(res[f]) * 1e6, 1), "us median per verify", np.round(np.array(res[f]) * 1e6).astype(int))
import specdec.verify as V, specdec.attention as A, collections
acc_t = collections.defaultdict(float); cnt = collections.defaultdict(int)
def wrapf(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc_t[name] += time.perf_counter() - t; cnt[name] += 1; return r
    setattr(mod, name, g)
wrapf(V, "_with_features"); wrapf(A.FeatureCapture, "features"); wrapf(A, "_model_call")
for f in (0, 1, 0, 1): run(f)
for k in acc_t: print(k, cnt[k], round(acc_t[k] / cnt[k] * 1e6, 1), "us")
acc_t.clear(); cnt.clear()
orig = A.model_forward
def mf(*a, capture=None, **k):
    t = time.perf_counter(); r = orig(*a, capture=capture, **k); key = "mf_feat" if capture is not None else "mf_plain"
    acc_t[key] += time.perf_counter() - t; cnt[key] += 1; return r
A.model_forward = mf
import specdec.attention as AA
for r in range(6):
    for f in ((0, 1) if r % 2 == 0 else (1, 0)): run(f)
for k in acc_t: print(k, cnt[k], round(acc_t[k] / cnt[k] * 1e6, 1), "us")
