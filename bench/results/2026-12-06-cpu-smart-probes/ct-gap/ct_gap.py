"""Where the planner's own 'measured by its c_T' speedup and the wall-clock one part: per call, wall seconds,
the stages' seconds (prefill included), and the planner's c_T against AR's per-step seconds."""
import time, numpy as np, torch
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.generate import SpeculativeGenerator
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
for ps, bs in (("humaneval", 1), ("spec_bench", 4)):
    prompts = harness.fit(harness.encode(tok, harness.load_prompts(ps, 16), False), target, 64)
    batches = harness._batches(prompts, bs, tok.pad_token_id, target.device)
    sups = {"ar": harness.make_supplier("ar", None), "smart": harness.make_supplier("smart", draft, cost=cost, depth=5, topk=4),
            "planner=0": harness.make_supplier("smart", draft, cost=cost, depth=5, topk=4, smart={"planner": False})}
    loops = {k: SpeculativeGenerator(target, s) for k, s in sups.items()}
    tot = {k: np.zeros(5) for k in loops}
    with torch.inference_mode():
        for rnd in range(2):
            for i, ids, mask in batches:
                for k, g in loops.items():
                    t0 = time.perf_counter()
                    out = g.generate(ids, attention_mask=mask, max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
                    wall = time.perf_counter() - t0
                    st = out.stats
                    steps = len(st.step_seconds)
                    p = st.plan
                    if rnd == 1:
                        tot[k] += [wall, st.stage_seconds["prefill"], sum(st.step_seconds), steps,
                                   (p.ar_seconds_measured if p else 0.0)]
    ar = tot["ar"]
    print(f"{ps} {bs}: AR per step {1e3 * ar[2] / ar[3]:.2f} ms (steps {ar[3]:.0f}), prefill {ar[1]:.3f} s, wall {ar[0]:.3f} s, untimed {ar[0] - ar[1] - ar[2]:.3f} s")
    for k in ("smart", "planner=0"):
        t = tot[k]
        print(f"  {k}: wall {t[0]:.3f} s = prefill {t[1]:.3f} + steps {t[2]:.3f} + untimed {t[0] - t[1] - t[2]:.3f}; "
              f"planner's c_T-priced AR seconds {t[4]:.3f} against AR's steps {ar[2]:.3f}; wall ratio {ar[0] / t[0]:.3f}, "
              f"steps ratio {ar[2] / t[2]:.3f}, by c_T {t[4] / t[2]:.3f}")
