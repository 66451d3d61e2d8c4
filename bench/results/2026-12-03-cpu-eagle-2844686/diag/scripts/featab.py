"""AR with and without the verifier capturing EAGLE features: per-step medians, alternating calls."""
import sys, time, numpy as np, torch
from specdec import harness
from specdec.generate import SpeculativeGenerator
from specdec.evaluation import load_eagle
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); reps = int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:b]
_, ids, mask = harness._batches(prompts, b, tok.pad_token_id, target.device)[0]
gens = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
        "ar-feat": SpeculativeGenerator(target, harness.make_supplier("ar", None))}
gens["ar-feat"].verifier.request_features((2, 3, 3))
med = {k: [] for k in gens}; stage = {k: [] for k in gens}; sums = {k: [] for k in gens}
with torch.inference_mode():
    for r in range(reps):
        for k in (list(gens) if r % 2 else list(gens)[::-1]):
            out = gens[k].generate(ids, attention_mask=mask, max_new_tokens=64, pad_token_id=tok.pad_token_id)
            st = np.array(out.stats.step_seconds[1:])
            med[k].append(np.median(st)); stage[k].append(np.percentile(st, 25)); sums[k].append(dict(out.stats.stage_seconds))
for k in gens:
    print(k, "median of step medians %.2f ms, of p25 %.2f ms" % (np.median(med[k]) * 1e3, np.median(stage[k]) * 1e3))
print("paired step-median ratio feat/ar: median %.3f" % np.median(np.array(med["ar-feat"]) / np.array(med["ar"])),
      "p25 ratio %.3f" % np.median(np.array(stage["ar-feat"]) / np.array(stage["ar"])))
for k in gens:
    print(k, {s: round(float(np.median([x[s] for x in sums[k]])) * 1e3, 1) for s in sums[k][0]})
