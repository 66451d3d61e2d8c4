"""EAGLE-3 + SMART with quick drafting steps (QUICK_DRAFT) against without (a full plan every step), the 4:2:8 tree
and AR beside, passes interleaved in one process (planners kept across passes), speedup over the same pass's AR.
    python quickab.py SET BATCH PASSES [smart options]"""
import sys, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opts = harness.smart_variant(sys.argv[4]) if len(sys.argv) > 4 else {}
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
QUICK = pl.QUICK_DRAFT
sups = {"ar": harness.make_supplier("ar", None), "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "quick": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=opts),
        "every": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=opts)}
def go(v):
    pl.QUICK_DRAFT = 10 ** 9 if v == "every" else QUICK
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
sec = collections.defaultdict(list); last = {}
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(v); sec[v].append(r.seconds); last[v] = r
a = np.array(sec["ar"])
print(f"{pset} batch {bs}, {passes} passes, options {sys.argv[4] if len(sys.argv) > 4 else '(defaults)'}")
for v in sups:
    x = a / np.array(sec[v]); r = last[v]
    extra = f" drafted/plain {r.plan['steps_drafted']}/{r.plan['steps_ar']}" if r.plan else ""
    print(f"{v:6s} speedup median {np.median(x):.3f} per pass {np.round(x, 3)} accepted {r.mean_accepted_length:.2f}{extra} "
          f"stages {({k: round(s, 3) for k, s in r.stage_seconds.items()})}")
q, e = np.array(sec["every"]), np.array(sec["quick"])
print(f"quick / every (seconds ratio every/quick per pass) median {np.median(q / e):.3f} {np.round(q / e, 3)}")
