"""EAGLE-3 + SMART against the 4:2:8 tree in the loop: perf_counter around SMART's host pieces and the head's forwards
(each supplier kept across PASSES passes of PROMPTS prompts, after one warm-up pass).  python hostparts.py SET BATCH PASSES PROMPTS"""
import sys, time, collections, numpy as np, torch
import specdec.suppliers.smart as S
import specdec.suppliers.smart_host as SH
import specdec.suppliers.eagle as E
import specdec.planner as P
import specdec.generate as G
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
acc = collections.defaultdict(float); cnt = collections.defaultdict(int); on = [False]
def wrap(owner, name, label):
    real = getattr(owner, name)
    def f(*a, **k):
        if not on[0]:
            return real(*a, **k)
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            acc[label] += time.perf_counter() - t; cnt[label] += 1
    setattr(owner, name, f)
wrap(S, "candidates", "candidates")
wrap(SH.HostTree, "grow", "grow")
wrap(SH.PoolTree, "add", "pool.add")
wrap(SH.PoolTree, "select", "pool.select")
wrap(SH.PoolTree, "frontier", "pool.frontier")
wrap(SH.PoolTree, "tree", "pool.tree")
wrap(SH.HostTree, "frontier", "frontier")
wrap(SH.HostTree, "__init__", "hosttree_init")
wrap(P.StepPlanner, "plan", "plan")
wrap(P.StepPlanner, "spent", "spent")
wrap(P.StepPlanner, "frontier_width", "frontier_width")
wrap(P.StepPlanner, "record", "planner.record")
wrap(P.StepPlanner, "observe_tree", "observe_tree")
wrap(P.StepPlanner, "quick_plain", "quick_plain")
wrap(E.EagleRunner, "catch_up", "catch_up")
wrap(E.EagleRunner, "forward_layer", "forward_layer")
wrap(E.EagleRunner, "begin_tree", "begin_tree")
wrap(E.EagleRunner, "commit", "runner.commit")
wrap(S.SmartSupplier, "propose", "smart.propose")
wrap(S.SmartSupplier, "commit", "smart.commit")
wrap(E.EagleSupplier, "propose", "tree.propose")
wrap(S.SmartSupplier, "_draft", "layered._draft")
wrap(S.SmartSupplier, "_draft_global", "global._draft")
import specdec.online_costs as OC
wrap(OC.OnlineCosts, "verify_array", "verify_array")
sups = {"ar": harness.make_supplier("ar", None),
        "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "eagle-smart": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head),
        "layered": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"selection": "layered"})}
def go(m):
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sups: go(m)
res = {}
for m in sups:
    acc.clear(); cnt.clear(); on[0] = True
    t = time.perf_counter()
    for p in range(passes): go(m)
    on[0] = False
    res[m] = (time.perf_counter() - t) / passes
    print(f"== {m}: {res[m]*1e3:.1f} ms a pass")
    for k in sorted(acc, key=lambda k: -acc[k]):
        print(f"  {k:16s} {acc[k]/passes*1e3:8.2f} ms/pass  {cnt[k]/passes:7.1f} calls/pass  {acc[k]/max(cnt[k],1)*1e6:8.1f} us/call")
