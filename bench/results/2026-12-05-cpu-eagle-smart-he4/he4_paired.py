"""Paired rounds at HumanEval b4: AR, EAGLE 4:2:8, EAGLE-3 + SMART; per call wall, step median, drafted steps.

    python he4_paired.py ROUNDS [OUT.json]   # from the repository root, the package installed
"""
import sys, time, json, numpy as np, torch
from specdec import SpeculativeGenerator
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance
B = 4; R = int(sys.argv[1]); OUT = sys.argv[2] if len(sys.argv) > 2 else None
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
loops = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)),
         "eagle": SpeculativeGenerator(target, harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))),
         "eagle-smart": SpeculativeGenerator(target, harness.make_supplier("eagle-smart", None, eagle=head, cost=smart_profile(None, target, head, [B])))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
batches = harness._batches(prompts, B, tok.pad_token_id, target.device)
calls = []
with torch.inference_mode():
    for r in range(R):
        for j, (_, ids, mask) in enumerate(batches):
            names = list(loops); names = names[(r + j) % 3:] + names[:(r + j) % 3]
            for n in names:
                t0 = time.perf_counter()
                out = loops[n].generate(ids, attention_mask=mask, max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
                wall = time.perf_counter() - t0
                s = out.stats; steps = np.asarray(s.step_seconds)
                calls.append(dict(run=n, round=r, batch=j, wall=wall, steps=s.steps, step_median=float(np.median(steps[1:])),
                                  prompt_step=float(steps[0]), drafted=s.plan.steps_drafted if s.plan else None,
                                  predicted=s.plan.predicted_speedup if s.plan else None))
            row = {c["run"]: c for c in calls[-3:]}
            print(f"round {r} batch {j}: AR {row['ar']['wall']:.3f} s (step {row['ar']['step_median']*1e3:.1f} ms) | eagle x{row['ar']['wall']/row['eagle']['wall']:.3f} | eagle-smart x{row['ar']['wall']/row['eagle-smart']['wall']:.3f} drafted {row['eagle-smart']['drafted']}/{row['eagle-smart']['steps']}", flush=True)
for n in ("eagle", "eagle-smart"):
    ratios = [a["wall"] / m["wall"] for a, m in zip([c for c in calls if c["run"] == "ar"], [c for c in calls if c["run"] == n])]
    tot = sum(c["wall"] for c in calls if c["run"] == "ar") / sum(c["wall"] for c in calls if c["run"] == n)
    print(f"{n}: paired median x{np.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); total-time ratio x{tot:.3f}")
if OUT:
    json.dump(dict(environment=provenance(), batch=B, rounds=R, calls=calls), open(OUT, "w"), indent=1)
