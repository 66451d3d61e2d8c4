import sys, numpy as np, collections
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(sys.argv[4]) if len(sys.argv) > 4 else {})
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
rows = []
orig = pl.StepPlanner._learn_step
def learn(self, plan, context, step, facts):
    plain = facts is None or plan.depth == 0
    if not plain:
        rows.append((self.state.drafted_run, step.width, step.verify, step.propose, facts.backlog, len(facts.layer_widths)))
    return orig(self, plan, context, step, facts)
pl.StepPlanner._learn_step = learn
for i in range(passes):
    harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
g = collections.defaultdict(list)
for run, w, v, p, b, nl in rows:
    g[(min(run, 4), min(w, 12) // 3)].append((v, p, b, nl))
print("run  widthbin  n  verify_ms  propose_ms  backlog  layers")
for k in sorted(g):
    a = np.array(g[k])
    print(k[0], f"w{k[1]*3}-{k[1]*3+2}", len(a), f"{np.median(a[:,0])*1e3:.2f}", f"{np.median(a[:,1])*1e3:.2f}", f"{np.median(a[:,2]):.0f}", f"{np.median(a[:,3]):.1f}")
