"""A/B in one interleaved cell: SMART at HEAD against SMART with the half margin after a probe turned off."""
import sys, json, numpy as np, torch
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
ps, bs = sys.argv[1], int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(ps, 16), False), target, 64)
a = harness.make_supplier("smart", draft, cost=cost, depth=5, topk=4)
b = harness.make_supplier("smart", draft, cost=cost, depth=5, topk=4)
orig = b.planner.plan
def plan(*args, **kw):
    if b.planner.state is not None:
        b.planner.state.probe_ended = False
    return orig(*args, **kw)
b.planner.plan = plan
runs = [harness.Run("ar", harness.make_supplier("ar", None)), harness.Run("smart", a), harness.Run("smart-full-margin", b)]
for r in runs:  # the bench's warm-up
    harness.run_method(target, r.supplier, prompts[:bs], batch_size=bs, max_new_tokens=4, method=r.method, prompt_set=ps,
                       pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=bs, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=ps, repeats=3)
harness.compare_to_ar([m for m, _ in res], {(r.method, ps, bs): o for r, (m, o) in zip(runs, res)})
ar = res[0][0]
for r, (m, _) in zip(runs, res):
    print(f"{ps} {bs} {r.method:18s} {m.tokens_per_second / ar.tokens_per_second:.3f}x paired {m.speedup_paired} "
          f"drafted {m.steps_drafted} plain {m.steps_ar} identical {m.identical_to_ar}")
