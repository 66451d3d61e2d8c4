"""Per call (batch of rows) of EAGLE-3 + SMART drafting every step (OPTIONS, e.g. planner=0,max_depth=4): steps, the rows'
mean accepted per step, the batch's progress per step, the call's spread (progress over mean), and what the slowest
active row said after k = 4, 8, 12 drafting steps. usage: callspread.py SET BATCH OPTIONS"""

import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs = sys.argv[1], int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(sys.argv[3]))
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
rows_log = []
orig = pl.StepPlanner._learn_step
def learn(self, plan, context, step, facts):
    acc = np.zeros(len(step.active) if step.active is not None else len(step.accepted))
    act = np.ones(acc.size, bool) if step.active is None else np.asarray(step.active, bool)
    acc[act] = step.accepted
    rows_log.append((acc, act))
    return orig(self, plan, context, step, facts)
pl.StepPlanner._learn_step = learn
for bi in range(0, 16, bs):
    rows_log.clear()
    out = harness.run_method(target, sup, prompts[bi:bi + bs], batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    A = np.array([a for a, _ in rows_log]); M = np.array([m for _, m in rows_log])
    steps = len(A)
    means = np.array([a[m].mean() for a, m in rows_log])
    tot = A.sum(0)
    line = f"batch {bi//bs}: steps {steps} mean acc {means.mean():.2f} batch/step {tot.max()/steps:.2f} spread {tot.max()/means.sum():.3f}"
    for k in (4, 8, 12):
        if k < steps:
            c = A[:k].sum(0); act = M[k - 1]
            line += f" | k{k}: {(c[act].min())/means[:k].sum():.3f}"
    print(line, flush=True)
