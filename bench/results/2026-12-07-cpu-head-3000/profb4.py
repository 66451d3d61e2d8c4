"""cProfile of the head's 4:2:8 tree against EAGLE-3 + SMART drafting every step (planner off) at one cell."""
import sys, cProfile, pstats, io
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs = sys.argv[1], int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
sups = {"tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "es0": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"planner": False})}
def go(v):
    return harness.run_method(target, sups[v], prompts, batch_size=bs, max_new_tokens=64, method=v, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for v in sups: go(v); go(v)
for v in sups:
    pr = cProfile.Profile(); pr.enable(); r = go(v); go(v); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(28)
    print("=====", v, "stages", {k: round(x, 3) for k, x in r.stage_seconds.items()}, "steps", r.steps if hasattr(r, "steps") else "")
    print(s.getvalue()[-6000:])
