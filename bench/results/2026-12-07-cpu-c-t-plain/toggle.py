"""EAGLE-3 + SMART with module constants toggled per supplier (each built and run with its own values; same
process, alternating passes), against AR and the head's 4:2:8 tree; medians of the per-pass speedups over
AR, stages averaged over the passes.
    python toggle.py SET BATCH PASSES PROMPTS NAME=module.CONST:value[,...] ...
NOPLAN=1 builds them with planner=False (drafting every step); METHOD=smart: SMART over the demo draft model
(and its 4:2:10 tree) instead of the EAGLE-3 head."""
import sys, importlib, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
import os
PLAN = {"planner": 0} if os.environ.get("NOPLAN") else {}
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
variants = {}
for arg in sys.argv[5:]:
    name, _, spec = arg.partition("=")
    sets = []
    for item in filter(None, spec.split(",")):
        target, _, value = item.partition(":")
        mod, _, const = target.rpartition(".")
        sets.append((importlib.import_module(mod), const, eval(value)))
    variants[name] = sets
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
DRAFT = os.environ.get("METHOD") == "smart"  # SMART over the demo draft model (reference: its 4:2:10 tree)
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft") if DRAFT else None
cost = smart_profile(None, target, draft if DRAFT else head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
sups = {"ar": harness.make_supplier("ar", None),
        "tree": harness.make_supplier("tree", draft, depth=4, topk=2, total_tokens=10) if DRAFT else
        harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))}
defaults = {(m, c): getattr(m, c) for sets in variants.values() for m, c, _ in sets}
for v in variants:
    for m, c, x in variants[v]: setattr(m, c, x)
    sups[v] = harness.make_supplier("smart", draft, cost=cost, smart=PLAN) if DRAFT else \
        harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=PLAN)
    for (m, c), x in defaults.items(): setattr(m, c, x)
def go(v):
    for (m, c), x in defaults.items(): setattr(m, c, x)
    for m, c, x in variants.get(v, []): setattr(m, c, x)
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
sec = collections.defaultdict(list); stg = collections.defaultdict(list); plan = collections.defaultdict(list)
for p in range(passes):
    for v in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        r = go(v); sec[v].append(r.seconds); stg[v].append(r.stage_seconds); plan[v].append(r.plan or {})
a = np.array(sec["ar"])
print(f"{pset} batch {bs}, {passes} passes of {n} prompts")
for v in sups:
    x = np.array(sec[v]); st = {k: np.mean([s[k] for s in stg[v]]) for k in stg[v][0]}
    pl = plan[v]
    extra = f" drafted {np.mean([q.get('steps_drafted', 0) for q in pl]):.0f} plain {np.mean([q.get('steps_ar', 0) for q in pl]):.0f}" if pl[0] else ""
    print(f"{v:10s} speedup median {np.median(a / x):.3f} mean {np.mean(a / x):.3f} passes {np.round(a / x, 3)} "
          f"propose {st.get('propose', 0):.3f} verify {st.get('verify', 0):.3f}{extra}")
