"""Per-step stage times and a cProfile of AR vs SMART forced plain (demo pair, CPU)."""
import cProfile, pstats, sys, io, time
import numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.planner import StepPlanner, Plan
method = sys.argv[1] if len(sys.argv) > 1 else "smart"
DEV = sys.argv[2] if len(sys.argv) > 2 else "cpu"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device=DEV, what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device=DEV, what="--draft")
d = head if method == "eagle-smart" else draft
cost = smart_profile(None, target, d, [1])
StepPlanner.plan = lambda self, backlog=1, context=None, cold=False: Plan(0, 1.0, 0.01)
prompts = harness.fit(harness.encode(tok, harness.load_prompts("spec_bench", 4), False), target, 64)
runs = [harness.Run("ar", harness.make_supplier("ar", None)), harness.Run(method, harness.make_supplier(method, draft, cost=cost, eagle=head))]
res = harness.run_interleaved(target, runs, prompts, batch_size=1, max_new_tokens=64, pad_token_id=tok.pad_token_id, eos_token_id=None, prompt_set="spec_bench", repeats=3)
for r,(m,_) in zip(runs,res):
    print(r.method, round(m.tokens_per_second,1), {k: round(v*1e3/ (4*64),3) for k,v in m.stage_seconds.items()})
from specdec import SpeculativeGenerator
ids = torch.tensor([prompts[0]], device=target.device)
for r in runs:
    g = SpeculativeGenerator(target, r.supplier)
    g.generate(ids, max_new_tokens=8, pad_token_id=0, eos_token_id=[])
    pr = cProfile.Profile(); pr.enable()
    for _ in range(3): g.generate(ids, max_new_tokens=64, pad_token_id=0, eos_token_id=[])
    pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30); print(r.method); print(s.getvalue()[:7000])
