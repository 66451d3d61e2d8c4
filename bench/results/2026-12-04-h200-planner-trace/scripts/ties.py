"""The GPU identity tests' model and prompts on the CPU: generate() under sdpa and eager, and the top-2 logit
margins along the greedy trajectory (a near-tie there lets a different attention kernel flip a token)."""
import torch
from tests.helpers import make_model, ragged_prompts
torch.manual_seed(0)
target = make_model("llama")
ids, mask = ragged_prompts([5, 11, 8])
outs = {}
for impl in ("sdpa", "eager"):
    target.set_attn_implementation(impl)
    outs[impl] = target.generate(ids, attention_mask=mask, max_new_tokens=24, do_sample=False, pad_token_id=0,
                                 output_scores=True, return_dict_in_generate=True)
print("sdpa == eager:", torch.equal(outs["sdpa"].sequences, outs["eager"].sequences))
scores = torch.stack(outs["sdpa"].scores, 1)  # [B, 24, V]
top = scores.topk(2, -1).values
margin = (top[..., 0] - top[..., 1])
rel = margin / top[..., 0].abs().clamp_min(1e-6)
print("min margin per row:", margin.min(1).values.tolist())
print("min relative margin:", rel.min().item(), "at", divmod(int(rel.argmin()), 24))
print("margins < 1e-3:", int((margin < 1e-3).sum()), "< 1e-2:", int((margin < 1e-2).sum()))
