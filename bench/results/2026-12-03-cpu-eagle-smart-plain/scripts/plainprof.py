"""eagle-smart in its true plain mode (a margin no plan beats: the planner's quiet path, no probes) vs AR:
interleaved rounds, stage seconds, and cProfile of the specdec functions of one plain call."""
import sys, cProfile, pstats
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
s = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
s.planner.margin = 9.0
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run("plain", s, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method, prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=4)
for r, (m, _) in zip(runs, res):
    print(r.method, round(m.tokens_per_second, 1), [round(x, 3) for x in m.round_seconds], {k: round(v, 4) for k, v in m.stage_seconds.items()}, m.steps_drafted, m.steps_ar)
pr = cProfile.Profile(); pr.enable()
harness.run_method(target, s, prompts, batch_size=b, max_new_tokens=64, method="plain", prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats("specdec/(planner|estimates|suppliers|verify|attention|generate|state)", 25)
