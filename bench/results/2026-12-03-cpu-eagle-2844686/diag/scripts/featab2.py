"""Which part of feature capture slows a plain step: hooks storing (capture), features() cat, the gather."""
import sys, time, numpy as np, torch
from specdec import harness, verify as V
from specdec.generate import SpeculativeGenerator
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); reps = int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:b]
_, ids, mask = harness._batches(prompts, b, tok.pad_token_id, target.device)[0]
orig = V._with_features
mode = {"m": "full"}
def patched(acc, features, width, with_prompt):
    if mode["m"] == "nogather":
        return acc
    return orig(acc, features, width, with_prompt)
V._with_features = patched
names = ["ar", "feat", "feat-nogather"]
gens = {k: SpeculativeGenerator(target, harness.make_supplier("ar", None)) for k in names}
for k in names[1:]:
    gens[k].verifier.request_features((2, 3, 3))
med = {k: [] for k in gens}; ver = {k: [] for k in gens}
with torch.inference_mode():
    for r in range(reps):
        order = names[r % 3:] + names[:r % 3]
        for k in order:
            mode["m"] = "nogather" if k == "feat-nogather" else "full"
            out = gens[k].generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
            med[k].append(np.median(out.stats.step_seconds[1:])); ver[k].append(out.stats.stage_seconds["verify"])
for k in gens:
    print(f"{k:14s} step median {np.median(med[k])*1e3:.2f} ms  paired vs ar {np.median(np.array(med[k]) / np.array(med['ar'])):.3f}  verify/call {np.median(ver[k])*1e3:.0f} ms")
