"""Where a plain SMART step's host time goes, against AR's: each supplier hook and planner part timed
(perf_counter around it), forced-plain SMART (margin 100, no probes) at batch B on Spec-Bench."""
import sys, time, statistics as st, collections, torch
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
bs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("spec_bench", 16), False), target, 64)[:2 * bs]
ar = harness.make_supplier("ar", None)
sm = harness.make_supplier("smart", draft, cost=cost, depth=5, topk=4, smart=dict(margin=100.0, probe_every=10**6))
acc = collections.defaultdict(float); cnt = collections.defaultdict(int)
def wrap(obj, name, key):
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[key] += time.perf_counter() - t; cnt[key] += 1; return r
    setattr(obj, name, g)
for s, tag in ((ar, "ar"), (sm, "smart")):
    for name in ("propose", "commit", "record_step", "start", "report"):
        if hasattr(s, name): wrap(s, name, f"{tag}.{name}")
wrap(sm.planner, "plan", "smart.planner.plan"); wrap(sm.planner, "_learn", "smart.planner._learn")
wrap(sm.planner, "predict", "smart.planner.predict"); wrap(sm.planner, "_hopeless", "smart.planner._hopeless")
wrap(sm.runner, "commit", "smart.runner.commit")
def go(s, m):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set="spec_bench",
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for s, m in ((ar, "ar"), (sm, "smart")): go(s, m)
acc.clear(); cnt.clear()
stages = {"ar": [], "smart": []}
for rep in range(4):
    for s, m in ((ar, "ar"), (sm, "smart")):
        stages[m].append(go(s, m).stage_seconds)
for k in sorted(acc):
    print(f"{k:28s} calls {cnt[k]:6d}  us/call {1e6 * acc[k] / cnt[k]:8.1f}")
steps = cnt["ar.propose"]
for m in stages:
    print(m, {k: round(1e6 * sum(s[k] for s in stages[m]) / steps, 1) for k in stages[m][0]}, "us/step")
