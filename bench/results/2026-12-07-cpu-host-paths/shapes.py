"""AR and EAGLE tree shapes in one process, interleaved rounds: per shape the best-of speedup and the paired median.

    python shapes.py SET BATCH ROUNDS SHAPE... (depth:topk:nodes, or chainN)
"""
import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
shapes = sys.argv[4:]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
sups = {"ar": harness.make_supplier("ar", None)}
for s in shapes:
    if s.startswith("chain"):
        sups[s] = harness.make_supplier("eagle-chain", None, eagle=head, depth=int(s[5:]))
    else:
        sups[s] = harness.make_supplier("eagle", None, eagle=head, eagle_shape=tuple(int(x) for x in s.split(":")))
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)
def go(m):
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
T = {k: [] for k in sups}; acc = {}
for k in sups: go(k)
for r in range(rounds):
    for k in (list(sups) if r % 2 == 0 else list(sups)[::-1]):
        res = go(k); T[k].append(res.seconds); acc[k] = (res.mean_accepted_length, res.mean_tree_size)
ar = np.array(T["ar"])
for k in shapes:
    t = np.array(T[k])
    print(f"{k:8s} best/best {ar.min() / t.min():.3f}  paired median {np.median(ar / t):.3f}  accepted {acc[k][0]:.2f} nodes {acc[k][1]:.1f}")
