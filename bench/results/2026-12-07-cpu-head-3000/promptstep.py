"""Plain decoding at batch B with and without the EAGLE head's features: AR, AR asking for the features
(the verifier captures them, the supplier ignores them), EAGLE-3 + SMART (plain throughout at large batches).
Per run: the prompt step's stages (the first verify also forwards the prompt), the other steps' sums, the run.
    python promptstep.py SET BATCH ROUNDS"""
import sys, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.base import ARSupplier
from specdec import generate as G
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
class ARFeat(ARSupplier):
    def feature_layers(self): return head.feature_layers
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = {"ar": harness.make_supplier("ar", None), "ar_feat": ARFeat(),
       "eagle-smart": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
print("prompt lengths", sorted(len(p) for p in prompts))
steps = collections.defaultdict(list); cur = [None]
orig = G.Stats.record
def rec(self, accepted, tree_size, new_tokens, **st):
    steps[cur[0]].append((self.steps, st)); return orig(self, accepted, tree_size, new_tokens, **st)
G.Stats.record = rec
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup: go(m)
res = collections.defaultdict(list)
for r in range(rounds):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        steps[m].clear(); out = go(m)
        first = sum(st["verify"] + st["commit"] + st["propose"] for i, st in steps[m] if i == 0)
        rest = sum(st["verify"] + st["commit"] + st["propose"] for i, st in steps[m] if i > 0)
        res[m].append((out.seconds, first, rest, out.stage_seconds["prefill"]))
for m in sup:
    a = np.median(np.array(res[m]), 0) * 1e3
    print(f"{pset} b{bs} {m:12s} run {a[0]:7.1f} ms  prompt steps {a[1]:6.1f}  other steps {a[2]:7.1f}  prefill stage {a[3]:5.1f}")
