"""HumanEval batch 1: EAGLE + SMART against fixed EAGLE shapes, and SMART without periodic probes or with a
shallower cap: where does its per-token cost go?"""
import sys, json, numpy as np
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
reps = int(sys.argv[1]) if len(sys.argv) > 1 else 3
pset = sys.argv[2] if len(sys.argv) > 2 else "humaneval"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)
mk = lambda m, **k: harness.make_supplier(m, None, cost=cost, eagle=head, **k)
runs = [harness.Run("ar", mk("ar")), harness.Run("eagle-4x2x8", mk("eagle", eagle_shape=(4, 2, 8))),
        harness.Run("eagle-5x4x12", mk("eagle", eagle_shape=(5, 4, 12))),
        harness.Run("eagle-smart", mk("eagle-smart")),
        harness.Run("eagle-smart[probe_every=100000]", mk("eagle-smart", smart={"probe_every": 100000})),
        harness.Run("eagle-smart[max_depth=6]", mk("eagle-smart", smart={"max_depth": 6}))]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:1], batch_size=1, max_new_tokens=4, method=r.method,
                       prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=1, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=pset, repeats=reps)
ar = res[0][0]
for r, (m, out) in zip(runs, res):
    st = m.stage_seconds
    steps = m.new_tokens / m.mean_accepted_length
    extra = f" drafted {m.steps_drafted} plain {m.steps_ar} probes {m.plan['probes']}" if m.plan else ""
    print(f"{r.method:34s} {m.tokens_per_second/ar.tokens_per_second:5.3f}x paired {harness.paired_speedup(m, ar) or 1:5.3f} "
          f"acc {m.mean_accepted_length:4.2f} tree {m.mean_tree_size:5.1f} ms/token {1e3*m.seconds/m.new_tokens:5.2f} "
          f"draft/verify ms per step {1e3*st['propose']/steps:5.2f}/{1e3*st['verify']/steps:5.2f} same {out == res[0][1]}{extra}")
