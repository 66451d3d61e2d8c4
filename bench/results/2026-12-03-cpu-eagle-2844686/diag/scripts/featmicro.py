"""Plain-step verify with and without feature capture, same cache, alternating, many steps."""
import sys, time, numpy as np, torch
from specdec import harness
from specdec.verify import TreeVerifier, PromptBlock
from specdec.suppliers.base import root_only
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); n = int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:b]
_, ids, mask = harness._batches(prompts, b, tok.pad_token_id, target.device)[0]
start = (mask == 0).sum(1)
vs = {"plain": TreeVerifier(target), "feat": TreeVerifier(target)}
vs["feat"].request_features((2, 3, 3))
times = {k: [] for k in vs}
with torch.inference_mode():
    for rep in range(n):
        for k in (list(vs) if rep % 2 else list(vs)[::-1]):
            v = vs[k]
            cache = v.new_cache(b, ids.shape[1] + 200)
            root = ids[:, -1]
            acc = v.verify(root_only(root), cache, validate=False, prompt=PromptBlock(ids[:, :-1], start))
            root = acc.tokens[:, 0]
            t = []
            for s in range(48):
                t0 = time.perf_counter()
                acc = v.verify(root_only(root), cache, validate=False)
                t.append(time.perf_counter() - t0)
                root = acc.tokens[:, 0]
            times[k].append(np.median(t))
r = np.array(times["feat"]) / np.array(times["plain"])
print({k: round(float(np.median(x)) * 1e3, 3) for k, x in times.items()}, "paired ratio median %.3f" % np.median(r), np.round(r, 3))
