"""EAGLE-3 + SMART, default options (W=none|N: the head's window): drafting steps that resume after plain steps
(predicted catch-up against measured propose, the catch-up factor) and the full plans weighed while plain
(pplan: weighed while plain, Dplan: while drafting; backlog, c: cold, gain, C5: the cap-5 step's predicted seconds).
usage: [W=none|N] [ALL=1] resumes.py SET BATCHES PASSES (the batches in order, the last one traced)"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bss, passes = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
bs = bss[-1]
QUIET = [True]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
import os
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(os.environ.get("ES", "default")))
if os.environ.get("W"):
    sup.runner.window = None if os.environ["W"] == "none" else int(os.environ["W"])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
orig_learn = pl.StepPlanner._learn_step
def learn(self, plan, context, step, facts):
    if not QUIET[0] and facts is not None and plan.depth and facts.backlog > 8:
        c = self.costs
        print(f"  resume b{facts.backlog} d{plan.depth} propose {step.propose*1e3:.2f} ms catch pred {c.catch_up(facts.backlog)*1e3:.2f} (factor {c.catch_factor:.2f}) usual {c.catch_up(4)*1e3:.2f} step {step.seconds*1e3:.2f} plan {plan.seconds*1e3:.2f} ar {c.ar(context)*1e3:.2f}")
    return orig_learn(self, plan, context, step, facts)
pl.StepPlanner._learn_step = learn
orig = pl.StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    was = self.state.drafting
    p = orig(self, backlog, context, cold)
    if p.gain and (not was or os.environ.get("ALL")) and not QUIET[0]:
        c = self.costs
        L, C = self.predict(backlog, context)
        print(f"  {'D' if was else 'p'}plan b{backlog}{'c' if cold else ''} gain {p.gain:.2f} -> {'D' if self.state.drafting else 'p'}{p.depth} catch {c.catch_up(backlog)*1e3:.2f} ms C5 {C[5]*1e3:.2f} ar {C[0]*1e3:.2f} r {self.state.realised:.2f} s {self.state.spread:.2f}")
    return p
pl.StepPlanner.plan = plan
for b in bss[:-1]:
    for i in range(passes):
        r = harness.run_method(target, sup, prompts, batch_size=b, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
        print("warm b", b, "acc", round(r.mean_accepted_length, 2), "plain", r.plan["steps_ar"], "drafted", r.plan["steps_drafted"])
QUIET[0] = False
for i in range(passes):
    r = harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    print("pass", i, "acc", round(r.mean_accepted_length, 2), "plain", r.plan["steps_ar"], "drafted", r.plan["steps_drafted"], "seconds", round(r.seconds, 3))
