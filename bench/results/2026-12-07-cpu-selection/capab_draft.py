"""capab.py over the demo draft model: static trees (tree:D:K:N) against SMART variants (smart[,option=value...])."""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
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
        d, t, n = (int(x) for x in v[5:].split(":")); return harness.make_supplier("tree", draft, depth=d, topk=t, total_tokens=n)
    opts = {}
    for kv in v.split(",")[1:]:
        k, x = kv.split("="); opts[k] = x if k in ("benefit", "selection") else (float(x) if "." in x else int(x))
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
for v in sups:
    r = go(v)
    steps = None
    print(v, "acc", round(r.mean_accepted_length, 3), "tree", round(r.mean_tree_size, 2), "stages", {k: round(x, 3) for k, x in r.stage_seconds.items()}, "plan", {k: (round(x, 3) if isinstance(x, float) else x) for k, x in (r.plan or {}).items()})
