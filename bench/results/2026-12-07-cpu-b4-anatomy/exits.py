"""Timeline of an EAGLE-3 + SMART planner: per pass, runs of drafting (D) and plain (p) steps, and at each switch the
full plan's gain parts: raw = best cap's L*c_T/C_decide, realised, spread, backlog, c_T."""
import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.planner as pl
pset, bs, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
opts = sys.argv[4] if len(sys.argv) > 4 else ""
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(opts) if opts else {})
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
events = []
orig = pl.StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    was = self.state.drafting
    p = orig(self, backlog, context, cold)
    kind = ("P" if p.probe else "D") if p.depth else ("c" if p.probe else "p")
    if p.gain:
        r, s = self.state.realised, self.state.spread
        events.append(f"{kind}[{'d' if was else 'p'}>{'d' if self.state.drafting else 'p'} g{p.gain:.2f} raw{p.gain/(r*s):.2f} r{r:.2f} s{s:.2f} b{backlog}{'c' if cold else ''} ar{self.costs.ar(context)*1e3:.2f}]")
    else:
        events.append(kind)
    return p
pl.StepPlanner.plan = plan
origq = pl.StepPlanner.quick_plain
def quick(self):
    q = origq(self)
    if q: events.append("q")
    return q
pl.StepPlanner.quick_plain = quick
origs = pl.StepPlanner.start
def start(self, cost):
    events.append("|")
    return origs(self, cost)
pl.StepPlanner.start = start
for i in range(passes):
    events.clear()
    r = harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    print("pass", i, "acc", round(r.mean_accepted_length, 2), "plain", r.plan["steps_ar"], "drafted", r.plan["steps_drafted"], "seconds", round(r.seconds, 3))
    out, last = [], None
    for e in events:  # compress runs of bare letters
        if len(e) == 1 and out and out[-1][0] == e and out[-1][1] is None:
            out[-1][2] += 1
        else:
            out.append([e[0] if len(e) == 1 else e, None if len(e) == 1 else e, 1])
    print(" ".join((f"{o[0]}x{o[2]}" if o[2] > 1 else o[0]) if o[1] is None else o[1] for o in out))
