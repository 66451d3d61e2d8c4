"""Why SMART's plain steps measure slower than AR's at batch 16: variants, rotating order, paired medians."""
import sys, numpy as np, torch
from specdec import SmartSupplier, SpeculativeGenerator
from specdec.evaluation import smart_profile
from specdec.harness import ARSupplier, load_prompts, encode, fit, _batches
from specdec.models import load_model, load_tokenizer
from specdec.planner import Plan
b, rounds = int(sys.argv[1]), int(sys.argv[2])
tok = load_tokenizer("demo-target"); target = load_model("demo-target"); draft = load_model("demo-draft")
prompts = fit(encode(tok, load_prompts("humaneval", 16), False), target, 64)
prof = smart_profile(None, target, draft, [b])
def forced(sm):
    def plain(backlog=1, context=None, cold=False):
        sm.planner._learn(); sm.planner.context = context
        sm.planner._plan = Plan(0, 1.0, sm.planner.costs.ar(context)); return sm.planner._plan
    sm.planner.plan = plain; return sm
class AR47(ARSupplier):
    def max_tree_size(self): return 47
class NoRunner(SmartSupplier):  # forced plain, the draft runner never started nor committed
    def start(self, state): self.planner.start(self._cost_model(state.batch_size)); self._tree = None
    def commit(self, acc): pass
    def propose(self, state):
        from specdec.suppliers.base import root_only
        self.planner.plan(1, float((state.history_len - state.host_start).max()), False); return root_only(state.root)
class Bare(NoRunner):
    def propose(self, state):
        from specdec.suppliers.base import root_only
        return root_only(state.root)
    def record_step(self, step): pass
gens = {"ar": SpeculativeGenerator(target, ARSupplier()), "ar47": SpeculativeGenerator(target, AR47()),
        "plain": SpeculativeGenerator(target, forced(SmartSupplier(draft, prof))),
        "norunner": SpeculativeGenerator(target, forced(NoRunner(draft, prof))),
        "bare": SpeculativeGenerator(target, Bare(draft, prof))}
names = list(gens)
bs = _batches(prompts, b, 0, target.device)
t = {k: [] for k in gens}; v = {k: [] for k in gens}
with torch.inference_mode():
    for g in gens.values(): g.generate(bs[0][1], bs[0][2], max_new_tokens=4, pad_token_id=0)
    slot = 0
    for rnd in range(rounds):
        for _, ids, m in bs:
            order = names[slot % len(names):] + names[:slot % len(names)]; slot += 1
            for k in order:
                st = gens[k].generate(ids, m, max_new_tokens=64, pad_token_id=0).stats
                t[k].append(st.seconds); v[k].append(st.stage_seconds["verify"])
for k in names:
    r = np.array(t["ar"]) / np.array(t[k]); rv = np.array(v["ar"]) / np.array(v[k])
    print(f"{k:9s} median s {np.median(t[k]):.3f}  paired vs ar: total {np.median(r):.3f} verify {np.median(rv):.3f}  ({len(r)} slots)")
