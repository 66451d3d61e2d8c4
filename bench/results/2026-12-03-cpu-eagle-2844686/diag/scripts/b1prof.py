"""cProfile of the propose stage at HumanEval batch 1: EAGLE 4:2:8 vs EAGLE + SMART (no periodic probes)."""
import sys, cProfile, pstats, io, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
which = sys.argv[1]
sup = (harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)) if which == "eagle" else
       harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart={"probe_every": 100000}))
gen = SpeculativeGenerator(target, sup)
batches = harness._batches(prompts, 1, tok.pad_token_id, target.device)
with torch.inference_mode():
    for _, ids, mask in batches:  # warm: the planner learns
        gen.generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
    pr = cProfile.Profile()
    orig = sup.propose
    def propose(state):
        pr.enable()
        try:
            return orig(state)
        finally:
            pr.disable()
    sup.propose = propose
    steps = 0
    for _, ids, mask in batches:
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
        steps += out.stats.steps
print("steps", steps)
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats(sys.argv[2] if len(sys.argv) > 2 else "tottime").print_stats("specdec", 45); print(s.getvalue()[:9000])
