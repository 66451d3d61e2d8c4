"""Per-step verify time of AR's steps against eagle-smart's plain steps, by the plain steps before them."""
import sys, time, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.verify import TreeVerifier
bs = int(sys.argv[1]); method = sys.argv[2] if len(sys.argv) > 2 else "eagle-smart"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
if method == "eagle-smart":
    sup = harness.make_supplier("eagle-smart", None, cost=smart_profile(None, target, head, [bs]), eagle=head)
else:
    sup = harness.make_supplier("smart", draft, cost=smart_profile(None, target, draft, [bs]))
ar = harness.make_supplier("ar", None)
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:4 * bs]
cur = [None]; log = []
orig = TreeVerifier.verify
def v(self, tree, *a, **k):
    t = time.perf_counter(); r = orig(self, tree, *a, **k); log.append((cur[0], tree.size, time.perf_counter() - t, k.get("prompt") is not None)); return r
TreeVerifier.verify = v
def go(s, m):
    cur[0] = m
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set="humaneval",
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for _ in range(2): go(ar, "ar"); go(sup, method)
log.clear(); secs = collections.defaultdict(float)
for r in range(5):
    for s, m in ((ar, "ar"), (sup, method)) if r % 2 == 0 else ((sup, method), (ar, "ar")):
        secs[m] += go(s, m).seconds
by = collections.defaultdict(list); run = 0
for m, size, t, prompt in log:
    if prompt: run = 0; continue
    if m == "ar": by["ar"].append(t); continue
    if size == 1:
        run += 1; by[f"plain#{min(run, 5)}"].append(t)
    else:
        run = 0; by["tree"].append(t)
for k in sorted(by): print(f"{k:8s} n {len(by[k]):5d} median {np.median(by[k]) * 1e6:8.1f} us  mean {np.mean(by[k]) * 1e6:8.1f}")
print({k: round(v, 3) for k, v in secs.items()}, "seconds over 5 rounds")
