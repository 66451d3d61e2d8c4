"""Where the planner's gain is biased while plain: per step, c_T used vs the plain step's measured seconds;
drafting steps' predicted vs measured seconds and tokens by cap; full plans' gain parts while plain."""
import sys, collections, numpy as np
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
steps = []; plans = []
orig_learn = pl.StepPlanner._learn_step
def learn(self, plan, context, step, facts):
    ar = self.costs.ar(context)
    rows = np.asarray(step.accepted)
    steps.append((plan.depth, plan.probe, plan.seconds, step.seconds, plan.length, float(rows.mean()) if rows.size else 1.0, ar,
                  self.state.plain_run, facts.backlog if facts is not None else 0))
    return orig_learn(self, plan, context, step, facts)
pl.StepPlanner._learn_step = learn
orig = pl.StepPlanner.plan
def plan(self, backlog=1, context=None, cold=False):
    p = orig(self, backlog, context, cold)
    if p.gain:
        L, C = self.predict(backlog, context)
        rate = L / C
        plans.append((self.state.drafting, p.gain, self.state.realised, self.state.spread, C[0], [float(rate[d] * C[0]) for d in range(len(L))]))
    return p
pl.StepPlanner.plan = plan
for i in range(passes):
    r = harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
    print("pass", i, "acc", round(r.mean_accepted_length, 2), "plain", r.plan["steps_ar"], "drafted", r.plan["steps_drafted"], "seconds", round(r.seconds, 3))
S = np.array([s[:7] + (s[7], s[8]) for s in steps], dtype=float)
plain = S[:, 0] == 0
warm = plain & (S[:, 7] >= 2)
print(f"plain steps {plain.sum()}: measured {S[plain,3].mean()*1e3:.2f} ms, c_T used {S[plain,6].mean()*1e3:.2f} ms; warm ones {warm.sum()}: {S[warm,3].mean()*1e3:.2f} vs {S[warm,6].mean()*1e3:.2f}")
for d in sorted(set(S[~plain, 0].astype(int))):
    m = (S[:, 0] == d) & ~plain
    st = m & (S[:, 8] <= 6)
    print(f"cap {d}: steps {m.sum()} (steady-ish {st.sum()}) predicted {S[m,2].mean()*1e3:.2f} ms measured {S[m,3].mean()*1e3:.2f}; steady {S[st,2].mean()*1e3:.2f} vs {S[st,3].mean()*1e3:.2f}; "
          f"tokens pred {S[m,4].mean():.2f} meas {S[m,5].mean():.2f}; c_T {S[m,6].mean()*1e3:.2f}")
P = [p for p in plans if not p[0]]
D = [p for p in plans if p[0]]
for name, group in (("plain", P), ("drafting", D)):
    if group:
        g = np.array([p[1] for p in group]); r = np.array([p[2] for p in group]); s = np.array([p[3] for p in group])
        rates = np.array([p[5] for p in group])
        print(f"plans {name} {len(group)}: gain mean {g.mean():.3f} [{g.min():.2f}, {g.max():.2f}] realised {r.mean():.3f} spread {s.mean():.3f} c_T {np.mean([p[4] for p in group])*1e3:.2f}; raw L/C*c_T by cap {np.round(rates.mean(0), 3)}")
