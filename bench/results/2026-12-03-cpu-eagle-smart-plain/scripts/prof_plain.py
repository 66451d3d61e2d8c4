"""torch.profiler: AR vs eagle-smart forced plain at one batch size; op self-time differences."""
import sys, torch, collections
from torch.profiler import profile, ProfilerActivity
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
from specdec.planner import Plan
b = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
s = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
def _plain(*a, _p=s.planner, _o=s.planner.plan, **k):
    p = _o(*a, **k)
    if p.depth:
        p = _p._plan = Plan(0, 1.0, _p.costs.ar(_p.context), p.probe)
    return p
s.planner.plan = _plain
sups = {"ar": harness.make_supplier("ar", None), "plain": s}
out = {}
for rep in range(2):
    for name, sup in sups.items():
        run = lambda: harness.run_method(target, sup, prompts, batch_size=b, max_new_tokens=64, method=name, prompt_set="humaneval",
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        run()
        with profile(activities=[ProfilerActivity.CPU]) as p:
            res, _ = run()
        print(name, round(res.tokens_per_second, 1), {k: round(v, 3) for k, v in res.stage_seconds.items()})
        out[name] = {e.key: (e.self_cpu_time_total, e.count) for e in p.key_averages()}
a, q = out["ar"], out["plain"]
print("total ms ar", sum(v[0] for v in a.values())/1e3, "plain", sum(v[0] for v in q.values())/1e3)
keys = sorted(set(a) | set(q), key=lambda k: -abs(q.get(k, (0, 0))[0] - a.get(k, (0, 0))[0]))
for k in keys[:30]:
    print(f"{k[:40]:40s} ar {a.get(k,(0,0))[0]/1e3:8.1f} ms x{a.get(k,(0,0))[1]:6d}  plain {q.get(k,(0,0))[0]/1e3:8.1f} ms x{q.get(k,(0,0))[1]:6d}")
