"""Diagnostic: the demo target's LM head and MLP weights, matrix products over 1-16 rows (one verify forward per tree width), microseconds."""
import time, torch
from specdec.models import load_model
t = load_model("demo-target"); c = t.config
print("vocab", c.vocab_size, "hidden", c.hidden_size, "inter", c.intermediate_size, "layers", c.num_hidden_layers, "tied", c.tie_word_embeddings)
W = t.lm_head.weight.detach()
def bench(f, n=200):
    for _ in range(10): f()
    t0 = time.perf_counter()
    for _ in range(n): f()
    return (time.perf_counter() - t0) / n * 1e6
with torch.inference_mode():
    for w in (1, 2, 4, 6, 10, 16):
        x = torch.randn(1, w, c.hidden_size)
        a = bench(lambda: torch.nn.functional.linear(x, W))
        b = bench(lambda: (W @ x[0].T).T)
        cc = bench(lambda: torch.cat([torch.nn.functional.linear(x[:, i:i+1], W) for i in range(w)], 1))
        Wi = t.model.layers[0].mlp.up_proj.weight.detach()
        d = bench(lambda: torch.nn.functional.linear(x, Wi))
        print(f"w={w:2d} lm_head linear {a:8.1f} us | W@x.T {b:8.1f} | per-row {cc:8.1f} | mlp up {d:6.1f}")
