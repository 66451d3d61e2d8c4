"""EAGLE-3 + SMART with each cap priced at its own spread (`spread.by_cap`) against one spread for every cap (the
flat form, as before), the 4:2:8 tree and AR beside; planners kept across passes, passes interleaved in one
process, speedup over the same pass's AR.
    python capab_spread.py SET BATCH PASSES"""
import sys, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("planner from", pl.__file__)
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
BY_CAP = pl.by_cap
flat = lambda spread, shape, cap_shapes: np.full(len(cap_shapes), spread)  # noqa: E731
sups = {"ar": harness.make_supplier("ar", None), "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "by_cap": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head),
        "flat": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)}
def go(v):
    pl.by_cap = flat if v == "flat" else BY_CAP
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
sec = collections.defaultdict(list); last = {}
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(v); sec[v].append(r.seconds); last[v] = r
a = np.array(sec["ar"])
print(f"{pset} batch {bs}, {passes} passes")
for v in sups:
    x = a / np.array(sec[v]); r = last[v]
    extra = f" drafted/plain {r.plan['steps_drafted']}/{r.plan['steps_ar']} tree {r.mean_tree_size:.2f}" if r.plan else ""
    print(f"{v:6s} speedup median {np.median(x):.3f} per pass {np.round(x, 3)} accepted {r.mean_accepted_length:.2f}{extra}")
for v in ("by_cap", "flat"):
    st = sups[v].planner.state
    print(v, "spread", round(st.spread, 3), "shape", round(st.shape, 3))
f, b = np.array(sec["flat"]), np.array(sec["by_cap"])
print(f"by_cap / flat (seconds flat/by_cap per pass) median {np.median(f / b):.3f} {np.round(f / b, 3)}")
