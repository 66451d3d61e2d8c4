"""SMART over the demo draft model: the tree (draft 'tree' method) against SMART variants, alternating passes."""
import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
variants = sys.argv[5:]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(None, target, draft, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
def make(v):
    if v == "ar": return harness.make_supplier("ar", None)
    if v.startswith("tree:"):
        d, k, t = (int(x) for x in v[5:].split(":"))
        return harness.make_supplier("tree", draft, depth=d, topk=k, total_tokens=t)
    opts = harness.smart_variant(v.split(",", 1)[1]) if "," in v else {}
    return harness.make_supplier("smart", draft, cost=cost, smart=opts)
sups = {v: make(v) for v in ["ar"] + variants}
def go(v):
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
sec = {v: [] for v in sups}; acc = {v: [] for v in sups}
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(v); sec[v].append(r.seconds); acc[v].append(r.mean_accepted_length)
a = np.array(sec["ar"])
for v in sups:
    x = np.array(sec[v])
    print(f"{v:40s} speedup median {np.median(a / x):.3f} per pass {np.round(a / x, 3)} accepted {np.mean(acc[v]):.2f}")
