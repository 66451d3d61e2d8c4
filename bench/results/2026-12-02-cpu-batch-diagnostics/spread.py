"""Diagnostic (not a benchmark): EAGLE 4:2:8 trees in batches; per call, the rows' mean accepted length per step against the batch's progress (row-equivalent tokens per step).

    python spread.py BATCH PROMPT_SET
"""

import sys, numpy as np, torch
from specdec import EagleSupplier, SpeculativeGenerator
from specdec.evaluation import load_eagle
from specdec.harness import load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1]); ps = sys.argv[2]
tok = load_tokenizer("demo-target"); target = load_model("demo-target")
head = load_eagle(None, target, "demo-target")
prompts = fit(encode(tok, load_prompts(ps, 16), False), target, 64)
sup = EagleSupplier(head, mode="tree", depth=4, topk=2, total_tokens=8)
recs = []
orig = sup.record_step
sup.record_step = lambda r: (recs.append((np.asarray(r.accepted).copy(), np.asarray(r.active).copy(), r.verify)), orig(r))[1]
g = SpeculativeGenerator(target, sup)
with torch.inference_mode():
    for _, ids, mask in _batches(prompts, b, 0, target.device):
        recs.clear()
        st = g.generate(ids, mask, max_new_tokens=64, pad_token_id=0, eos_token_id=tok.eos_token_id).stats
        mean_active = np.mean([a.mean() for a, _, _ in recs]); per_row = np.mean([a.sum() / b for a, _, _ in recs])
        nact = [int(m.sum()) for _, m, _ in recs]
        print(f"steps {len(recs)+1} mean-active {mean_active:.2f} row-equiv {per_row:.2f} eta {per_row/mean_active:.2f} active per step {nact}")
        print("  verify ms by #active:", {k: round(1e3*np.mean([v for _, m, v in recs if m.sum()==k]),1) for k in sorted(set(nact))})
