"""HumanEval batch 1, EAGLE + SMART: the planner's layer and catch-up prices against the head's forwards as timed."""
import sys, time, collections, numpy as np, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.suppliers.eagle import EagleRunner
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"probe_every": 100000})
gen = SpeculativeGenerator(target, sup)
timed = collections.defaultdict(list)
for name in ("forward_layer", "catch_up"):
    orig = getattr(EagleRunner, name)
    def wrap(self, *a, _o=orig, _n=name, **k):
        t0 = time.perf_counter(); out = _o(self, *a, **k); timed[_n].append((time.perf_counter() - t0, a)); return out
    setattr(EagleRunner, name, wrap)
props = []
batches = harness._batches(prompts, 1, tok.pad_token_id, target.device)
with torch.inference_mode():
    for p in range(2):
        timed.clear(); props.clear()
        for _, ids, mask in batches:
            out = gen.generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
            props.append((out.stats.stage_seconds["propose"], out.stats.plan.steps_drafted))
c = sup.planner.costs
fl = [t for t, a in timed["forward_layer"]]
cu = [t for t, a in timed["catch_up"]]
drafted = sum(d for _, d in props); propose = sum(p for p, _ in props)
print(f"drafting steps {drafted}, layer forwards {len(fl)} ({len(fl)/drafted:.2f}/step), catch-ups {len(cu)}")
print(f"measured: forward_layer mean {1e3*np.mean(fl):.2f} ms (median {1e3*np.median(fl):.2f}), catch_up mean {1e3*np.mean(cu):.2f} ms, "
      f"propose per drafting step {1e3*propose/drafted:.2f} ms; host rest per step {1e3*(propose - sum(fl) - sum(cu))/drafted:.2f} ms")
print(f"planner: layer(1) {1e3*c.layer(1):.2f} layer(2) {1e3*c.layer(2):.2f} layer(4) {1e3*c.layer(4):.2f} ms; catch_up(4) {1e3*c.catch_up(4):.2f} "
      f"catch_up(6) {1e3*c.catch_up(6):.2f} ms; factors layer {c.layer_factor:.3f} catch {c.catch_factor:.3f}; c_T {1e3*c.ar(None):.2f} ms")
w = [a[0].shape[1] if a and hasattr(a[0], 'shape') else None for t, a in timed["forward_layer"]]
print("layer widths seen", collections.Counter(w).most_common(5))
