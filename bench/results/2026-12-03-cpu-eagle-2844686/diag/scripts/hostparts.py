"""HumanEval batch 1, EAGLE + SMART (no periodic probes): where the drafting step's host time goes, per part."""
import time, collections, numpy as np, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.suppliers import smart as S, smart_host as H
from specdec.suppliers.eagle import EagleRunner
from specdec import planner as P, estimates as E
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
T = collections.defaultdict(float); N = collections.Counter()
def timed(owner, name, label=None):
    orig = getattr(owner, name); label = label or name
    def wrap(*a, **k):
        t0 = time.perf_counter()
        try:
            return orig(*a, **k)
        finally:
            T[label] += time.perf_counter() - t0; N[label] += 1
    setattr(owner, name, wrap)
timed(S, "candidates"); timed(H.HostTree, "grow"); timed(H.HostTree, "frontier"); timed(H.HostTree, "__init__", "HostTree()")
timed(P.StepPlanner, "plan"); timed(P.StepPlanner, "spent"); timed(P.StepPlanner, "frontier_width")
timed(E.OnlineCosts, "verify_array"); timed(EagleRunner, "forward_layer"); timed(EagleRunner, "catch_up")
timed(EagleRunner, "begin_tree"); timed(S.SmartSupplier, "_draft"); timed(S.SmartSupplier, "propose")
timed(S, "TreeBatch", "TreeBatch()"); timed(S.SmartSupplier, "commit"); timed(S.SmartSupplier, "record_step")
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"probe_every": 100000})
gen = SpeculativeGenerator(target, sup)
batches = harness._batches(prompts, 1, tok.pad_token_id, target.device)
with torch.inference_mode():
    for p in range(2):
        T.clear(); N.clear(); drafted = 0
        for _, ids, mask in batches:
            out = gen.generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
            drafted += out.stats.plan.steps_drafted
print("drafting steps", drafted, "(second pass); ms per drafting step:")
for k in sorted(T, key=T.get, reverse=True):
    print(f"  {k:16s} {1e3*T[k]/drafted:6.3f} ms  ({N[k]} calls, {1e3*T[k]/N[k]:.3f} ms each)")
inner = T["_draft"] - T["forward_layer"] - T["catch_up"] - T["candidates"] - T["grow"] - T["frontier"] - T["spent"] - T["frontier_width"] - T["verify_array"] - T["begin_tree"] - T["HostTree()"] - T["TreeBatch()"]
print(f"  _draft's own lines (the rest) {1e3*inner/drafted:.3f} ms; propose outside _draft {1e3*(T['propose']-T['_draft'])/drafted:.3f} ms")
