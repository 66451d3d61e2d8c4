"""Does the KV cache's capacity slow plain steps? AR with its own capacity vs AR with eagle-smart's (max_tree_size 64)."""
import sys
from specdec import harness
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
big = harness.make_supplier("ar", None)
big.max_tree_size = lambda: 64
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run("ar-bigcache", big, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method, prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=4)
for r, (m, _) in zip(runs, res):
    print(r.method, round(m.tokens_per_second, 1), [round(x, 3) for x in m.round_seconds], m.stage_seconds)
