"""Per drafting step at one cell: propose's wall time split into the head's catch-up, its layer forwards and the rest
(host work), for the head's 4:2:8 tree and EAGLE-3 + SMART drafting every step (planner off)."""
import sys, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.eagle import EagleRunner
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
sups = {"tree 4:2:8": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "smart, planner off": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"planner": False})}
acc = collections.defaultdict(float); cur = [None]
def wrap(cls, name):
    f = getattr(cls, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); acc[(cur[0], name)] += time.perf_counter() - t; acc[(cur[0], name + " calls")] += 1; return r
    setattr(cls, name, g)
wrap(EagleRunner, "catch_up"); wrap(EagleRunner, "forward_layer")
res = collections.defaultdict(list)
def go(v):
    cur[0] = v
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v)
for r in range(rounds):
    for v in (list(sups) if r % 2 == 0 else list(sups)[::-1]):
        for k in [k for k in acc if k[0] == v]: acc[k] = 0.0
        out = go(v)
        steps = acc[(v, "catch_up calls")]
        prop = out.stage_seconds["propose"]
        res[v].append([out.seconds, prop / steps, acc[(v, "catch_up")] / steps, acc[(v, "forward_layer")] / steps,
                       acc[(v, "forward_layer calls")] / steps, out.stage_seconds["verify"] / steps, out.mean_accepted_length])
for v in sups:
    a = np.median(np.array(res[v]), 0)
    print(f"{pset} b{bs} {v:20s} run {a[0]*1e3:7.1f} ms | per drafting step: propose {a[1]*1e3:.2f} ms = catch-up {a[2]*1e3:.2f} "
          f"+ layers {a[3]*1e3:.2f} ({a[4]:.2f} forwards) + rest {(a[1]-a[2]-a[3])*1e3:.2f}; verify {a[5]*1e3:.2f}; accepted {a[6]:.2f}")
