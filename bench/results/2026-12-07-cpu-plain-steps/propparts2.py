"""In-loop: a forced-plain SMART step's planner time, quick steps vs full plans (wt code)."""
import sys, time, numpy as np, collections
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.planner import StepPlanner
bs = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:2 * bs]
sm = harness.make_supplier("smart", draft, cost=cost, smart=dict(margin=100.0, probe_every=10**6))
ar = harness.make_supplier("ar", None)
acc = collections.defaultdict(float); n = collections.Counter()
def wrap(name):
    f = getattr(StepPlanner, name)
    def g(self, *a, **k):
        t = time.perf_counter(); r = f(self, *a, **k); acc[name] += time.perf_counter() - t; n[name] += 1; return r
    setattr(StepPlanner, name, g)
for name in ("plan", "quick_plain", "_learn", "predict", "_hopeless", "record"): wrap(name)
def go(s, m):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set="humaneval",
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for _ in range(3): go(sm, "smart"); go(ar, "ar")
acc.clear(); n.clear(); P = {"ar": 0.0, "smart": 0.0}
for _ in range(6):
    P["ar"] += go(ar, "ar").stage_seconds["propose"]; P["smart"] += go(sm, "smart").stage_seconds["propose"]
for k in acc: print(f"{k:12s} calls {n[k]:5d} {acc[k] / n[k] * 1e6:7.1f} us/call {acc[k] / (6 * 128) * 1e6:6.1f} us/step")
print({k: round(v / (6 * 128) * 1e6, 1) for k, v in P.items()}, "propose us/step")
