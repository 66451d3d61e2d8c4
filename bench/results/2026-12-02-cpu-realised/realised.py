"""SMART at HumanEval batch 1 (16 prompts, twice over, one planner): its drafting steps' measured tokens and
seconds against their plans', and what the former realised estimator (a running log-mean of per-step
ratios, weight 0.1) reads on the same steps, against a ratio of sums."""
import math, numpy as np, torch
from specdec import SmartSupplier, SpeculativeGenerator
from specdec.evaluation import smart_profile
from specdec.harness import load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
tok = load_tokenizer("demo-target"); target = load_model("demo-target"); draft = load_model("demo-draft")
prompts = fit(encode(tok, load_prompts("humaneval", 16), False), target, 64)
sm = SmartSupplier(draft, smart_profile(None, target, draft, [1]))
steps = []  # (tokens, predicted tokens, seconds, predicted seconds) of each drafting step
real = sm.planner._realise
def realise(plan, tokens=0.0, seconds=0.0):
    if plan is not None:
        steps.append((tokens, plan.length, seconds, plan.seconds))
    return real(plan, tokens, seconds)
sm.planner._realise = realise
g = SpeculativeGenerator(target, sm)
with torch.inference_mode():
    for _, ids, m in _batches(prompts, 1, 0, target.device) * 2:
        g.generate(ids, m, max_new_tokens=64, pad_token_id=0)
a = np.array(steps)
print(f"drafting steps {len(a)}; tokens measured / predicted {a[:, 0].sum() / a[:, 1].sum():.3f}, "
      f"seconds measured / predicted {a[:, 2].sum() / a[:, 3].sum():.3f}, "
      f"rate (ratio of sums) {(a[:, 0].sum() / a[:, 1].sum()) / (a[:, 2].sum() / a[:, 3].sum()):.3f}")
ratios = np.clip((a[:, 0] / a[:, 2]) / (a[:, 1] / a[:, 3]), 0.25, 4.0)
ema, trace = 1.0, []
for r in ratios:
    ema = math.exp(0.9 * math.log(ema) + 0.1 * math.log(r)); trace.append(ema)
print(f"per-step ratios: mean {ratios.mean():.3f}, geometric mean {math.exp(np.log(ratios).mean()):.3f}; "
      f"the former running log-mean over these steps: percentiles 10/50/90 {np.percentile(trace, [10, 50, 90]).round(3)}")
print(sm.report())
