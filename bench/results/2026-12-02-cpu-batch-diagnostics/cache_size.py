"""Plain steps: AR with its own cache vs AR with a cache sized as SMART's (max_tree_size 47, and 250)."""
import numpy as np, torch
from specdec import SpeculativeGenerator
from specdec.harness import ARSupplier, load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
tok = load_tokenizer("demo-target"); target = load_model("demo-target")
prompts = fit(encode(tok, load_prompts("humaneval", 16), False), target, 64)
class Big(ARSupplier):
    def __init__(self, n): super().__init__(); self.n = n
    def max_tree_size(self): return self.n
gens = {"ar": SpeculativeGenerator(target, ARSupplier()), "cap47": SpeculativeGenerator(target, Big(47)), "cap250": SpeculativeGenerator(target, Big(250)), "ar2": SpeculativeGenerator(target, ARSupplier())}
for b in (4, 16):
    bs = _batches(prompts, b, 0, target.device)
    res = {k: [] for k in gens}
    with torch.inference_mode():
        for g in gens.values(): g.generate(bs[0][1], bs[0][2], max_new_tokens=4, pad_token_id=0)
        for rnd in range(3):
            for _, ids, m in bs:
                for k, g in gens.items():
                    st = g.generate(ids, m, max_new_tokens=64, pad_token_id=0).stats
                    res[k].append(sum(st.step_seconds[1:]) / (len(st.step_seconds) - 1))
    print(b, {k: round(1e3 * float(np.median(v)), 2) for k, v in res.items()})
