"""F.linear (x @ W.T, MKL) and mm with a pre-transposed weight at 1..32 rows, the demo target's shapes, in us."""
import torch, time
import torch.nn.functional as F
torch.manual_seed(0)
print("threads", torch.get_num_threads())
def bench(fn, n=2000):
    for _ in range(200): fn()
    t = time.perf_counter()
    for _ in range(n): fn()
    return (time.perf_counter() - t) / n * 1e6
for K, N in ((256, 704), (256, 4096), (704, 256)):
    W = torch.randn(N, K)
    Wt = W.t().contiguous()
    row = []
    for M in (1, 2, 4, 8, 16, 32):
        x = torch.randn(M, K)
        row.append((M, round(bench(lambda: F.linear(x, W))), round(bench(lambda: torch.mm(x, Wt)))))
    print(K, N, row)
