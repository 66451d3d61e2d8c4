import sys, time, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.suppliers.smart as sm, specdec.suppliers.smart_host as sh, specdec.planner as pl, specdec.suppliers.eagle as eg
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
opts = harness.smart_variant(sys.argv[4])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=opts)
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(float); N = collections.defaultdict(int); on = [False]
def wrap(obj, name, label=None):
    label = label or name
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if on[0]: T[label] += time.perf_counter() - t; N[label] += 1
        return r
    setattr(obj, name, g)
for n in ["propose", "commit", "record_step", "_draft_pooled", "_draft_global"]: wrap(sm.SmartSupplier, n)
for n in ["select", "tree", "widths_by_depth", "add", "frontier"]: wrap(sh.PoolTree, n)
wrap(sh.PoolTree, "from_layers")
wrap(sh, "candidates"); sm.candidates = sh.candidates
for n in ["plan", "spent", "record", "observe_tree", "frontier_width", "quick_plain"]: wrap(pl.StepPlanner, n)
for n in ["catch_up", "forward_layer", "begin_tree", "commit"]: wrap(eg.EagleRunner, n, "runner." + n)
def go():
    return harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(); on[0] = True
for r in range(rounds): res = go()
steps = N["propose"]
print(sys.argv[4], "proposes", steps // rounds, "per round")
for k in sorted(T, key=lambda k: -T[k]): print(f"  {k:28s} {T[k] / steps * 1e3:7.3f} ms/step  calls/step {N[k] / steps:.2f}")
