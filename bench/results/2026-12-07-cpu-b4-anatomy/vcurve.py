"""After SMART runs at a fixed cap: the planner's corrected verify curve by width against the verify stage measured
per width in the same runs (steady steps), and the profile's."""
import sys, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.generate as gen
pset, bs, rounds, opts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sups = {"tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "es": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(opts))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
byw = collections.defaultdict(list); cur = [None]
orig = gen.Stats.record
def record(self, accepted, tree_size, new_tokens, **kw):
    byw[(cur[0], tree_size)].append(kw.get("verify", 0.0))
    return orig(self, accepted, tree_size, new_tokens, **kw)
gen.Stats.record = record
for r in range(rounds):
    for m in (["tree", "es"] if r % 2 == 0 else ["es", "tree"]):
        cur[0] = m
        harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                           pad_token_id=tok.pad_token_id, eos_token_id=None)
p = sups["es"].planner
c = p.costs
ctx = p.context
print("context", ctx, "c_T", round(c.ar(ctx) * 1e3, 3))
curve = c.verify_array(ctx)
prof = c.model.verify_seconds(np.arange(1, 14)) * c.model.context_factor(ctx)
for w in range(1, 14):
    meas = {m: byw.get((m, w), []) for m in ("tree", "es")}
    s = "  ".join(f"{m} n={len(v)} med {np.median(v)*1e3:.2f}" for m, v in meas.items() if v)
    print(f"width {w:2d}: planner {curve[w]*1e3:6.2f} profile {prof[w-1]*1e3:6.2f} ms | measured verify stage: {s}")
