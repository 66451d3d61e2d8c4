"""A/B in one interleaved cell: EAGLE-3 + SMART at HEAD against the same with 8a1d9f6's flat forwards estimate."""
import sys, numpy as np, torch
from specdec import estimates
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer

class FlatForwards(estimates.DepthStats):
    def _estimate(self):  # 8a1d9f6's estimate: a depth never drafted carries the run chance of the one above
        at_risk, survived, capped, ran, width_sum, built_risk, built_survived = (row.tolist() for row in self.table)
        length, rates, onward, forwards, width = [1.0], [1.0], [1.0], [0.0, 0.0], [1.0]
        s, rate, on, run, last = 1.0, self.prior_rate, self.prior_rate, 1.0, 1.0
        P = estimates.PRIOR
        for d in range(1, self.max_depth + 1):
            rate = (survived[d] + P * rate) / (at_risk[d] + P); rates.append(rate)
            on = (built_survived[d] + P * on) / (built_risk[d] + P); onward.append(on)
            s *= rate; length.append(length[-1] + s)
            if d >= 2:
                run = (ran[d] + P * run) / (capped[d] + P); forwards.append(forwards[-1] + run)
            last = width_sum[d] / capped[d] if capped[d] > 1e-3 else last
            width.append(last)
        layer_width = self.layer_sum / self.layers if self.layers > 1e-3 else 1.0
        return estimates.Estimates(np.array(length), rates, onward, np.array(forwards), np.array(width), layer_width)

ps, bs = sys.argv[1], int(sys.argv[2])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(ps, 16), False), target, 64)
a = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
b = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
b.planner.depths = FlatForwards(b.planner.max_depth)
runs = [harness.Run("ar", harness.make_supplier("ar", None)),
        harness.Run("eagle-4:2:8", harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))),
        harness.Run("eagle-smart", a), harness.Run("eagle-smart-flat", b)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:bs], batch_size=bs, max_new_tokens=4, method=r.method, prompt_set=ps,
                       pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=bs, max_new_tokens=64, pad_token_id=tok.pad_token_id,
                              eos_token_id=tok.eos_token_id, prompt_set=ps, repeats=3)
harness.compare_to_ar([m for m, _ in res], {(r.method, ps, bs): o for r, (m, o) in zip(runs, res)})
ar = res[0][0]
for r, (m, _) in zip(runs, res):
    print(f"{ps} {bs} {r.method:18s} {m.tokens_per_second / ar.tokens_per_second:.3f}x paired {m.speedup_paired} "
          f"accepted {m.mean_accepted_length:.2f} tree {m.mean_tree_size:.1f} drafted {m.steps_drafted} plain {m.steps_ar} "
          f"identical {m.identical_to_ar}")
