"""The demo target's one-token forward (batch B, a 120-token cache) right after other work: the next 8
forwards' median times over 10 rounds, per kind of interjection, after 6 forwards back to back.

    python gap.py [B]
"""
import gc
import sys
import time

import numpy as np
import torch

from specdec.app.models import load_model

B = int(sys.argv[1]) if len(sys.argv) > 1 else 8
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
torch.manual_seed(0)
with torch.inference_mode():
    ids = torch.randint(5, 4000, (B, 120))
    cache = target(ids, use_cache=True).past_key_values
    tok = torch.randint(5, 4000, (B, 1))
    one = torch.randint(5, 4000, (1, 60))
    cache1 = target(one, use_cache=True).past_key_values
    dcache = draft(ids, use_cache=True).past_key_values

    def forward(model, token, kv):
        model(token, past_key_values=kv, use_cache=True)
        kv.crop(-1)

    def step() -> float:
        t = time.perf_counter()
        forward(target, tok, cache)
        return (time.perf_counter() - t) * 1e3

    def loop(ms, work):
        end = time.perf_counter() + ms / 1e3
        while time.perf_counter() < end:
            work()

    big = torch.empty(8 << 20)  # 32 MB
    small, w = torch.randn(64, 256), torch.randn(256, 256)
    square = torch.randn(384, 384)
    kinds = {
        "none": lambda: None,
        "sleep 2 ms": lambda: time.sleep(0.002),
        "sleep 5 ms": lambda: time.sleep(0.005),
        "sleep 10 ms": lambda: time.sleep(0.01),
        "sleep 20 ms": lambda: time.sleep(0.02),
        "sleep 40 ms": lambda: time.sleep(0.04),
        "python busy loop 20 ms": lambda: loop(20, lambda: None),
        "small matmuls 20 ms": lambda: loop(20, lambda: small @ w),
        "384x384 matmuls 20 ms (both threads)": lambda: loop(20, lambda: square @ square),
        "one 32 MB fill": lambda: big.fill_(1.0),
        "32 MB fills 20 ms": lambda: loop(20, lambda: big.fill_(1.0)),
        "copying the target's weights 20 ms": lambda: loop(20, lambda: [p.clone() for p in target.parameters()]),
        "gc.collect()": gc.collect,
        "target forwards at batch 1, 20 ms": lambda: loop(20, lambda: forward(target, one[:, :1], cache1)),
        "draft model forwards at batch B, 20 ms": lambda: loop(20, lambda: forward(draft, tok, dcache)),
    }
    for _ in range(30):
        step()
    times = {k: [] for k in kinds}
    for _ in range(10):
        for kind, work in kinds.items():
            for _ in range(6):
                step()
            work()
            times[kind].append([step() for _ in range(8)])
print(f"batch {B}, torch {torch.__version__}, {torch.get_num_threads()} threads; ms per forward, the 8 after the work")
for kind, t in times.items():
    print(f"{kind:40s} " + " ".join(f"{x:5.2f}" for x in np.median(np.array(t), 0)))
