"""AR at batch B: the target's KV cache as 2L separate buffers (per layer) or one allocation, interleaved."""
import sys, numpy as np, torch
from specdec.app import harness
from specdec.app.models import load_model, load_tokenizer
from specdec import cache as C
bs, pset = int(sys.argv[1]), sys.argv[2]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:bs]
orig_init = C.TreeCache.__init__
def single(self, num_layers, batch_size, num_kv_heads, head_dim, capacity, *, dtype, device):
    orig_init(self, num_layers, batch_size, num_kv_heads, head_dim, 1, dtype=dtype, device=device)
    shape = (batch_size, num_kv_heads, capacity, head_dim)
    store = torch.zeros((num_layers, 2, *shape), dtype=dtype, device=device)
    for i, layer in enumerate(self.layers):
        layer.keys, layer.values = store[i, 0], store[i, 1]
    self.capacity = capacity
ar = harness.make_supplier("ar", None)
def go(kind):
    C.TreeCache.__init__ = single if kind == "single" else orig_init
    return harness.run_method(target, ar, prompts, batch_size=bs, max_new_tokens=64, method="ar", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
kinds = ["per-layer", "single"]
for k in kinds: go(k)
t = {k: [] for k in kinds}
for r in range(10):
    for k in (kinds if r % 2 == 0 else kinds[::-1]):
        t[k].append(go(k).stage_seconds["verify"])
for k in kinds: print(f"{k:10s} verify per run median {np.median(t[k]) * 1e3:7.1f} ms  all {np.round(np.array(t[k]) * 1e3).astype(int)}")
