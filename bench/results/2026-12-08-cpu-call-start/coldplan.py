"""A fresh EAGLE-3 + SMART planner's plans at a b4 call's start: backlog, catch-up price, c_T, gain, cold."""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec import planner as P
bs = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 4), False), target, 64)[:bs]
orig = P.StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    p = orig(self, backlog, context, cold)
    c = self.costs
    L, S = self.predict(backlog, context)
    print(f"  backlog {backlog} cold {cold} catch_up {c.catch_up(backlog)*1e3:.1f}ms usual {c.catch_up(max(1, round(float(L[-1]))))*1e3:.1f} ar {c.ar(context)*1e3:.1f} spread {self.state.spread:.3f} realised {self.state.realised:.3f} L {np.round(L,2)} S(ms) {np.round(S*1e3,1)} -> depth {p.depth} gain {p.gain:.2f} drafting {self.state.drafting}")
    return p
P.StepPlanner.plan = plan
es = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
for n in (4, 12):
    print("call", n)
    harness.run_method(target, es, prompts, batch_size=bs, max_new_tokens=n, method="es", prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
