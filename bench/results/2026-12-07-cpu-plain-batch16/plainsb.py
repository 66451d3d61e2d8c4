"""Plain steps at batch B: AR, AR with the head's features requested (verify captures them), forced-plain
eagle-smart; per-step stage times (medians over steps) and whole-run seconds."""
import sys, time, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.suppliers.base import ARSupplier
from specdec import generate as G
bs = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
from pathlib import Path
class ARFeat(ARSupplier):
    def feature_layers(self): return head.feature_layers
sup = {"ar": harness.make_supplier("ar", None), "ar_feat": ARFeat(),
       "smart": harness.make_supplier("smart", draft, cost=smart_profile(Path("/work/cache/s2/smart2/profile.json"), target, draft, [1, 4, 8, 16]))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(sys.argv[2], 16), False), target, 64)[:max(bs, 8)]
steps = collections.defaultdict(list)
orig = G.Stats.record
cur = [None]
def rec(self, accepted, tree_size, new_tokens, **st):
    steps[cur[0]].append(st); return orig(self, accepted, tree_size, new_tokens, **st)
G.Stats.record = rec
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=sys.argv[2],
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup:
    for _ in range(2): go(m)
steps.clear(); tot = collections.defaultdict(list)
for r in range(6):
    for m in (list(sup) if r % 2 == 0 else list(sup)[::-1]):
        res = go(m); tot[m].append((res.seconds, res.stage_seconds["prefill"]))
for m in sup:
    st = steps[m][1:]
    med = {k: round(float(np.median([s[k] for s in st])) * 1e6) for k in st[0]}
    sec = np.array(tot[m])
    print(f"{m:13s} run median {np.median(sec[:, 0]) * 1e3:7.1f} ms (prefill stage {np.median(sec[:, 1]) * 1e3:5.1f})  step medians us {med}")
