"""In-loop: where a forced-plain SMART step's propose time goes, against AR's (perf_counter around parts).

    python propparts.py B supplier   # at 79dc8c2: the supplier's propose split line by line (its body as it
                                     # was then, no quick_plain), its commit, the planner's _learn
    python propparts.py B planner    # with StepPlanner.quick_plain: the planner's methods, per call and step
"""
import sys, time, collections
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.planner import StepPlanner
from specdec.suppliers import smart as S
from specdec.suppliers.base import root_only
bs, mode = int(sys.argv[1]), sys.argv[2]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:2 * bs]
sm = harness.make_supplier("smart", draft, cost=cost, smart=dict(margin=100.0, probe_every=10**6))
ar = harness.make_supplier("ar", None)
acc = collections.defaultdict(float); n = collections.Counter()


def timed(owner, name, key=None):
    f = getattr(owner, name)
    def g(self, *a, **k):
        t = time.perf_counter(); r = f(self, *a, **k); acc[key or name] += time.perf_counter() - t; n[key or name] += 1
        return r
    setattr(owner, name, g)


def propose(self, state):  # SmartSupplier.propose at 79dc8c2, its parts timed
    t0 = time.perf_counter()
    self.runner.backlog.all()
    t1 = time.perf_counter()
    cold = self.runner.cold
    backlog = int(self.runner.backlog.max()) + self.runner.pending_prefill
    t2 = time.perf_counter()
    context = float((state.history_len - state.host_start).max())
    t3 = time.perf_counter()
    self.planner.plan(backlog, context, cold)
    t4 = time.perf_counter()
    self._facts, self._tree = None, None
    r = root_only(state.root)
    t5 = time.perf_counter()
    for k, a, b in (("all", t0, t1), ("backlog", t1, t2), ("context", t2, t3), ("plan", t3, t4), ("root_only", t4, t5)):
        acc[k] += b - a; n[k] += 1
    return r


if mode == "supplier":
    S.SmartSupplier.propose = propose
    timed(StepPlanner, "_learn", "plan._learn")
    timed(S.SmartSupplier, "commit")
else:
    for name in ("plan", "quick_plain", "_learn", "predict", "_hopeless", "record"):
        timed(StepPlanner, name)


def go(s, m):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set="humaneval",
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]


for _ in range(3): go(sm, "smart"); go(ar, "ar")
acc.clear(); n.clear(); P = {"ar": 0.0, "smart": 0.0}
for _ in range(6):
    P["ar"] += go(ar, "ar").stage_seconds["propose"]; P["smart"] += go(sm, "smart").stage_seconds["propose"]
for k in acc: print(f"{k:12s} calls {n[k]:5d} {acc[k] / n[k] * 1e6:7.1f} us/call {acc[k] / (6 * 128) * 1e6:6.1f} us/step")
print({k: round(v / (6 * 128) * 1e6, 1) for k, v in P.items()}, "propose us/step")
