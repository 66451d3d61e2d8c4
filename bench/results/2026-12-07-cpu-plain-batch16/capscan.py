"""AR at batch B on a prompt set with the target KV capacity set to chosen values (through max_tree_size)."""
import sys, numpy as np
from specdec.app import harness
from specdec.app.models import load_model, load_tokenizer
bs, pset = int(sys.argv[1]), sys.argv[2]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:bs]
P = max(len(p) for p in prompts)
base = P + 2 * 65
caps = [int(x) for x in sys.argv[3].split(",")] if len(sys.argv) > 3 else [base]
print("P", P, "caps", caps)
sup = {}
for c in caps:
    s = harness.make_supplier("ar", None); s.max_tree_size = (lambda e: lambda: e)((c - P) // 2 - 64); sup[c] = s
def go(c):
    return harness.run_method(target, sup[c], prompts, batch_size=bs, max_new_tokens=64, method="ar", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for c in sup: go(c)
t = {c: [] for c in sup}
for r in range(int(sys.argv[4]) if len(sys.argv) > 4 else 6):
    for c in (caps if r % 2 == 0 else caps[::-1]):
        t[c].append(go(c).stage_seconds["verify"])
for c in caps: print(f"capacity {c:5d} ({c % 64:2d} mod 64): verify per run median {np.median(t[c]) * 1e3:7.1f} ms")
