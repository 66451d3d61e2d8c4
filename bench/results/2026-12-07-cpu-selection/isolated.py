"""SMART's host pieces timed alone (tight loops over inputs captured in the loop, layered rule), with cProfile:
what they cost when the host's caches are warm.  python isolated.py SET BATCH"""
import sys, copy, time, cProfile, pstats, io, numpy as np, torch
import specdec.suppliers.smart as S
import specdec.suppliers.smart_host as SH
import specdec.planner as P
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs = sys.argv[1], int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:8]
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"selection": "layered"})
caps = {"grow": [], "cand": [], "plan": [], "obs": []}
grab = [False]
rg = SH.HostTree.grow
def grow(self, t, l, r):
    if grab[0] and len(caps["grow"]) < 200: caps["grow"].append((copy.deepcopy(self), t.copy(), l.copy(), r))
    return rg(self, t, l, r)
SH.HostTree.grow = grow
rc = S.candidates
def cand(lg, k, v=None):
    if grab[0] and len(caps["cand"]) < 200: caps["cand"].append((lg.clone(), k, v))
    return rc(lg, k, v)
S.candidates = cand
rp = P.StepPlanner.plan
def plan(self, *a, **k):
    if grab[0] and len(caps["plan"]) < 100 and self.state.drafting: caps["plan"].append((copy.deepcopy(self), a, k))
    return rp(self, *a, **k)
P.StepPlanner.plan = plan
ro = P.StepPlanner.observe_tree
def obs(self, *a):
    if grab[0] and len(caps["obs"]) < 100: caps["obs"].append((copy.deepcopy(self), tuple(np.copy(x) for x in a)))
    return ro(self, *a)
P.StepPlanner.observe_tree = obs
def go():
    harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="eagle-smart", prompt_set=pset,
                       pad_token_id=tok.pad_token_id, eos_token_id=None)
go(); go(); grab[0] = True; go(); grab[0] = False
print({k: len(v) for k, v in caps.items()})

def bench(name, items, setup, fn, reps=20):
    tot, n = 0.0, 0
    for _ in range(reps):
        for it in items:
            a = setup(it); t = time.perf_counter(); fn(a); tot += time.perf_counter() - t; n += 1
    print(f"== {name}: {tot / n * 1e6:.1f} us/call over {len(items)} inputs")
    pr = cProfile.Profile()
    for _ in range(3):
        for it in items:
            a = setup(it); pr.enable(); fn(a); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(16); print(s.getvalue()[-4000:])
bench("candidates", caps["cand"], lambda it: it, lambda it: rc(*it))
bench("grow", caps["grow"], lambda it: (copy.deepcopy(it[0]),) + it[1:], lambda a: rg(*a))
bench("plan", caps["plan"], lambda it: (copy.deepcopy(it[0]), it[1], it[2]), lambda a: rp(a[0], *a[1], **a[2]))
bench("observe_tree", caps["obs"], lambda it: (copy.deepcopy(it[0]), it[1]), lambda a: ro(a[0], *a[1]))
