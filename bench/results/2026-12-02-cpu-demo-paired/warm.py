"""The demo's SMART at batch 1 (4 HumanEval prompts, fresh planner): what its warm-up probes cost."""
import numpy as np, torch
from specdec import SmartSupplier, SpeculativeGenerator
from specdec.harness import ARSupplier, load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
from specdec.profiling import Profile
tok = load_tokenizer("demo-target"); target = load_model("demo-target"); draft = load_model("demo-draft")
prompts = fit(encode(tok, load_prompts("humaneval", 4), False), target, 64)
prof = Profile.load("/work/main/bench/results/2026-12-02-cpu-smart-paired/profile.json")
for trial in range(3):
    sm = SmartSupplier(draft, prof); plans = []
    real = sm.planner.plan
    def plan(*a, **k):
        p = real(*a, **k); plans.append(p); return p
    sm.planner.plan = plan
    ga, gs = SpeculativeGenerator(target, ARSupplier()), SpeculativeGenerator(target, sm)
    bs = _batches(prompts, 1, 0, target.device)
    ar_t, sm_t, steps = 0.0, 0.0, []
    with torch.inference_mode():
        for _, ids, m in bs:
            a = ga.generate(ids, m, max_new_tokens=64, pad_token_id=0).stats; ar_t += a.seconds
            n0 = len(plans)
            s = gs.generate(ids, m, max_new_tokens=64, pad_token_id=0).stats; sm_t += s.seconds
            steps += list(zip(plans[n0 + 1:], s.step_seconds[1:], s.accepted_lengths[1:]))
    ar_step = ar_t / (64 * len(bs))
    warm = [x for x in steps if x[0].depth and x[0].probe][:8]
    other = [x for x in steps if x[0].depth and not x[0].probe]
    plain = [x for x in steps if not x[0].depth]
    f = lambda xs: (len(xs), round(1e3 * sum(t for _, t, _ in xs), 1), sum(a for _, _, a in xs))
    print(f"trial {trial}: speedup {ar_t / sm_t:.3f}  AR ms/token {1e3 * ar_step:.2f} | warm-up probes (n, ms, tokens) {f(warm)}"
          f" | other drafting {f(other)} | plain {f(plain)} | warm-up depth caps {[p.depth for p, _, _ in warm]}")
