import sys, time, numpy as np, torch
sys.path.insert(0, sys.argv[1])
import specdec.cache as cc
print(cc.__file__)
torch.manual_seed(0)
for B in (1, 4, 16):
    c = cc.TreeCache(6, B, 2, 64, 512, dtype=torch.float32, device="cpu")
    c.length.fill_(200); c.host_length[:] = 200
    W = 5
    ni = torch.tensor([[0, 1, 3, 6, 7]] * B); cnt = torch.full((B,), 5); hcnt = cnt.numpy(); hni = ni.numpy()
    ts = []
    for r in range(2000):
        c.tree_len = 8
        c.length.fill_(200); c.host_length[:] = 200
        t = time.perf_counter(); c.commit(ni, cnt, hcnt, hni); ts.append(time.perf_counter() - t)
    print(B, f"commit median {np.median(ts)*1e6:.1f} us")
