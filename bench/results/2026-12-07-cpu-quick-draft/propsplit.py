"""Per drafting step, in one process, passes interleaved: the stages (from Stats) and timers inside propose and
commit, for the 4:2:8 tree and SMART variants at fixed caps."""
import sys, time, collections, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.suppliers.smart as sm, specdec.suppliers.smart_host as sh, specdec.planner as pl, specdec.suppliers.eagle as eg
import specdec.generate as gen
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
variants = sys.argv[4:]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
def make(v):
    if v.startswith("eagle:"):
        return harness.make_supplier("eagle", None, eagle=head, eagle_shape=tuple(int(x) for x in v[6:].split(":")))
    return harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(v.split(",", 1)[1]))
sups = {v: make(v) for v in variants}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(float); N = collections.defaultdict(int); on = [False]; cur = [None]
def wrap(obj, name, label=None):
    label = label or name
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if on[0]: T[(cur[0], label)] += time.perf_counter() - t; N[(cur[0], label)] += 1
        return r
    setattr(obj, name, g)
for n in ["propose", "commit", "_draft_pooled"]: wrap(sm.SmartSupplier, n, "smart." + n)
for n in ["propose", "commit", "_select"]: wrap(eg.EagleSupplier, n, "eagle." + n)
wrap(sh.PoolTree, "from_layers"); wrap(sh.PoolTree, "select"); wrap(sh.PoolTree, "tree")
for n in ["plan", "record", "observe_tree"]: wrap(pl.StepPlanner, n, "planner." + n)
for n in ["catch_up", "forward_layer", "begin_tree", "commit"]: wrap(eg.EagleRunner, n, "runner." + n)
stage = collections.defaultdict(float); steps = collections.defaultdict(int)
orig = gen.Stats.record
def record(self, accepted, tree_size, new_tokens, **kw):
    if on[0]:
        steps[cur[0]] += 1
        for k, v in kw.items(): stage[(cur[0], k)] += v
    return orig(self, accepted, tree_size, new_tokens, **kw)
gen.Stats.record = record
def go(v):
    cur[0] = v
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
on[0] = True
for r in range(rounds):
    for v in (variants if r % 2 == 0 else variants[::-1]): go(v)
for v in variants:
    n = steps[v]
    print(f"{v}: steps/round {n / rounds:.1f}; stages ms/step", {k: round(stage[(vv, k)] / n * 1e3, 3) for (vv, k) in stage if vv == v})
    for (vv, k) in sorted((key for key in T if key[0] == v), key=lambda key: -T[key]):
        print(f"   {k:26s} {T[(vv, k)] / n * 1e3:7.3f} ms/step  calls/step {N[(vv, k)] / n:.2f}")
