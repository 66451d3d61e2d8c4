"""Diagnostic: the demo target's verify forward by tree width at batch 1 (chain trees, context 300), and an op profile at width 1 and 6."""
import time, numpy as np, torch
from specdec import TreeVerifier
from specdec.tree import TreeBatch
from specdec.models import load_model
from torch.profiler import profile, ProfilerActivity
target = load_model("demo-target")
v = TreeVerifier(target)
P = 300
ids = torch.randint(5, 1000, (1, P))
def fresh():
    cache = v.new_cache(1, P + 200)
    v.prefill(cache, ids[:, :-1], torch.zeros(1, dtype=torch.int64))
    return cache
res = {}
with torch.inference_mode():
    for w in (1, 2, 3, 6, 10):
        toks = torch.randint(5, 1000, (1, w)); toks[0, 0] = ids[0, -1]
        tree = TreeBatch.chain(toks, torch.tensor([w]))
        ts = []
        for rep in range(3):
            cache = fresh()
            for _ in range(12):
                t0 = time.perf_counter(); acc = v.verify(tree, cache); ts.append(time.perf_counter() - t0)
        res[w] = np.median(ts[3:])
    print({w: round(t * 1e3, 2) for w, t in res.items()})
    for w in (1, 6):
        toks = torch.randint(5, 1000, (1, w)); toks[0, 0] = ids[0, -1]
        tree = TreeBatch.chain(toks, torch.tensor([w])); cache = fresh()
        for _ in range(3): v.verify(tree, cache)
        with profile(activities=[ProfilerActivity.CPU]) as p:
            for _ in range(10): v.verify(tree, cache)
        print("width", w); print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=14))
