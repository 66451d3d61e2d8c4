"""Diagnostic: EAGLE + SMART over four calls of one batch (4 new tokens, then 64 three times): each plan (cold flag: depth stats steps: steps since probe: backoff, depth, p = probe, [drafting, spread, realised]) and the propose stage's time per call.

    python cold_probe.py BATCH PROMPT_SET
"""
import sys, numpy as np, torch
from specdec import SmartSupplier, SpeculativeGenerator
from specdec.evaluation import load_eagle, smart_profile
from specdec.harness import load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); ps = sys.argv[2]
tok = load_tokenizer("demo-target"); target = load_model("demo-target")
head = load_eagle(None, target, "demo-target")
prompts = fit(encode(tok, load_prompts(ps, b), False), target, 64)
prof = smart_profile(None, target, head, [b])
sm = SmartSupplier(head, prof); g = SpeculativeGenerator(target, sm)
pl = sm.planner; log = []
orig = pl.plan
def plan(*a, **k):
    p = orig(*a, **k); s = pl.state
    log.append(f"{a[2] if len(a)>2 else None}:{pl.depths.steps}:{s.since_probe}:{s.backoff} {p.depth}{'p' if p.probe else ''}{'c' if k.get('cold') else ''}[{s.drafting:d} sp{s.spread:.2f} re{s.realised:.2f}]"); return p
pl.plan = plan
_, ids, mask = _batches(prompts, b, 0, target.device)[0]
with torch.inference_mode():
    for n in (4, 64, 64, 64):
        log.clear(); st = g.generate(ids, mask, max_new_tokens=n, pad_token_id=0).stats
        print(n, "propose ms", round(1e3 * st.stage_seconds["propose"]), "total", round(1e3 * st.seconds))
        print("  ", " ".join(x for x in log if " 0[" not in x) , "| plain:", sum(" 0[" in x for x in log))
        print("  ", sm.report())
