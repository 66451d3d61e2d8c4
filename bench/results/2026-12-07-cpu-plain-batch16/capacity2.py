"""AR at batch B with the KV capacity of suppliers whose max_tree_size is 1 (AR), 47 (SMART), 200."""
import sys, numpy as np
from specdec.app import harness
from specdec.app.models import load_model, load_tokenizer
bs = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts(sys.argv[2], 16), False), target, 64)[:2 * bs]
sup = {}
for extra in (1, 47, 200):
    s = harness.make_supplier("ar", None); s.max_tree_size = (lambda e: lambda: e)(extra); sup[extra] = s
def go(e):
    return harness.run_method(target, sup[e], prompts, batch_size=bs, max_new_tokens=64, method="ar", prompt_set=sys.argv[2],
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for e in sup: go(e)
t = {e: [] for e in sup}
for r in range(8):
    for e in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        m = go(e); t[e].append(m.stage_seconds["verify"])
for e in sup: print(f"max_tree_size {e:4d}: verify per run median {np.median(t[e]) * 1e3:7.1f} ms  mean {np.mean(t[e]) * 1e3:7.1f}")
