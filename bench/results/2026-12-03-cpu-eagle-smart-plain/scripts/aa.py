"""A/A: three identical AR runs interleaved (the harness's rotating order), best-of and paired: the noise floor."""
import sys
from specdec import harness
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); reps = int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
runs = [harness.Run(f"ar-{i}", harness.make_supplier("ar", None), None) for i in range(3)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method, prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=reps)
a = res[0][0]
for r, (m, _) in zip(runs, res):
    print(f"b={b} {r.method}: {m.tokens_per_second:6.1f} tok/s, best-of vs ar-0 {m.tokens_per_second / a.tokens_per_second:.3f}, paired {harness.paired_speedup(m, a) or 1:.3f}, rounds", [round(x, 3) for x in m.round_seconds])
