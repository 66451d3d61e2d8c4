"""Fraction of the target's greedy tokens outside the head's draft vocabulary, per prompt set."""
import sys, torch, specdec
from specdec.app.models import load_model, load_tokenizer
from specdec.app.harness import load_prompts
torch.set_num_threads(2)
target = load_model("demo-target", device="cpu"); tok = load_tokenizer("demo-target")
head = specdec.EagleHead.from_pretrained("specdec/demo_pair/eagle", target)
t2d = head.t2d.cpu()
for ps in ("humaneval", "spec_bench"):
    out_ids = []
    for p in load_prompts(ps, 16):
        ids = tok(p, return_tensors="pt").input_ids
        g = target.generate(ids, max_new_tokens=64, do_sample=False, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        out_ids.append(g[0, ids.shape[1]:])
    allt = torch.cat(out_ids)
    miss = (~t2d[allt]).float().mean().item()
    print(ps, "tokens", allt.numel(), "outside draft vocab %.3f" % miss)
    print("  sample:", repr(tok.decode(out_ids[1][:40])), "|", repr(tok.decode(out_ids[3][:40])))
