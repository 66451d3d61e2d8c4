"""EAGLE-3 + SMART drafting every step at one cell: wall time per drafting step of each host part of propose."""
import sys, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers import smart_host as SH, smart as S
from specdec.suppliers.eagle import EagleRunner
from specdec import planner as P
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"planner": False})
acc = collections.defaultdict(float)
def wrap(owner, name, label):
    f = getattr(owner, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[label] += time.perf_counter() - t; acc[label + " calls"] += 1; return r
    setattr(owner, name, g)
for n in ("add", "select", "frontier", "newest_active", "tree", "widths_by_depth", "narrow"):
    wrap(SH.PoolTree, n, "pool." + n)
wrap(S, "candidates", "candidates")
wrap(EagleRunner, "catch_up", "head catch_up"); wrap(EagleRunner, "forward_layer", "head forward_layer")
wrap(EagleRunner, "begin_tree", "runner.begin_tree")
for n in ("plan", "spent", "frontier_width"):
    wrap(P.StepPlanner, n, "planner." + n)
wrap(S.SmartSupplier, "_draft_global", "_draft_global total")
wrap(S.SmartSupplier, "propose", "propose total")
wrap(S.SmartSupplier, "commit", "supplier.commit")
wrap(S.SmartSupplier, "record_step", "supplier.record_step")
def go():
    return harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="es", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(); acc.clear(); steps = 0
for r in range(rounds):
    out = go(); steps += 0
steps = acc["_draft_global total calls"]
print(f"{pset} b{bs}: {steps} steps; per step, microseconds:")
for k, v in sorted(((k, v) for k, v in acc.items() if not k.endswith("calls")), key=lambda kv: -kv[1]):
    print(f"  {k:28s} {v / steps * 1e6:8.1f}   ({acc[k + ' calls'] / steps:.2f} calls)")
