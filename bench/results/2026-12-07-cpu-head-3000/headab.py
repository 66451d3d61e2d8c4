"""Two EAGLE-3 heads for the demo target, alternating passes in one process: speedup over AR per pass of the head's
static trees, and accepted length. python headab.py SET BATCH PASSES PROMPTS HEAD_A HEAD_B SHAPE [SHAPE...]"""
import sys, numpy as np, specdec
from specdec.app import harness
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n, pa, pb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
shapes = [tuple(int(x) for x in s.split(":")) for s in sys.argv[7:]]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
heads = {"A": specdec.EagleHead.from_pretrained(pa, target), "B": specdec.EagleHead.from_pretrained(pb, target)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
sups = {"ar": harness.make_supplier("ar", None)}
for h, head in heads.items():
    for s in shapes:
        sups[f"{h} {s}"] = harness.make_supplier("eagle", None, eagle=head, eagle_shape=s)
def go(v):
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method="eagle", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
sec = {v: [] for v in sups}; acc = {v: [] for v in sups}
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(v); sec[v].append(r.seconds); acc[v].append(r.mean_accepted_length)
a = np.array(sec["ar"])
for v in sups:
    x = np.array(sec[v])
    print(f"{pset} b{bs} {v:20s} speedup median {np.median(a / x):.3f} per pass {np.round(a / x, 3)} accepted {np.mean(acc[v]):.3f}")
