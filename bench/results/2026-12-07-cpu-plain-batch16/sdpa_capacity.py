import torch, time, numpy as np
import torch.nn.functional as F
B, Hq, Hk, D, kv = 16, 4, 2, 64, 300
q = torch.randn(B, Hq, 1, D)
mask = torch.zeros(B, 1, 1, kv, dtype=torch.bool); mask[..., :] = True
res = {}
caps = [373, 375, 465, 383, 563, 300]
bufs = {c: (torch.zeros(B, Hk, c, D), torch.zeros(B, Hk, c, D)) for c in caps}
for c, (k, v) in bufs.items(): k.normal_(); v.normal_()
for rep in range(5):
    for c in caps:
        k, v = bufs[c]
        ks, vs = k[:, :, :kv], v[:, :, :kv]
        t = time.perf_counter()
        for _ in range(200):
            F.scaled_dot_product_attention(q, ks, vs, attn_mask=mask, enable_gqa=True)
        res.setdefault(c, []).append((time.perf_counter() - t) / 200)
for c in caps: print(c, round(np.median(res[c]) * 1e6, 1), "us")
