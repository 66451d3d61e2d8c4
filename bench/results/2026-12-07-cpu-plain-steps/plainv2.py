"""Per-step verify times: AR, AR + dummy host work, forced-plain smart / eagle-smart (median, mean, p90)."""
import sys, time, torch, numpy as np
from pathlib import Path
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec.verify import TreeVerifier
from specdec.suppliers.base import ARSupplier, root_only
bs = int(sys.argv[1]); pset = "humaneval"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(Path("/work/cache/s1/profile.json"), target, draft, [1, 4, 8, 16])
ecost = smart_profile(None, target, head, [bs])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:2 * bs]
force = dict(margin=100.0, probe_every=10**6)
class Busy(ARSupplier):
    def propose(self, state):
        x = 0.0
        for i in range(int(sys.argv[2]) if len(sys.argv) > 2 else 300):
            x += np.float64(i) * 1.5
        return root_only(state.root)
sup = {"ar": harness.make_supplier("ar", None), "ar_busy": Busy(),
       "smart_plain": harness.make_supplier("smart", draft, cost=cost, smart=force),
       "esmart_plain": harness.make_supplier("eagle-smart", None, cost=ecost, eagle=head, smart=force)}
cur = [None]; times = {m: [] for m in sup}
orig = TreeVerifier.verify
def v(self, *a, **k):
    t = time.perf_counter(); r = orig(self, *a, **k); times[cur[0]].append(time.perf_counter() - t); return r
TreeVerifier.verify = v
props = {m: [] for m in sup}
def go(m):
    cur[0] = m
    return harness.run_method(target, sup[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sup:
    for _ in range(3): go(m)
for m in sup: times[m].clear()
tot = {m: 0.0 for m in sup}; prop = {m: 0.0 for m in sup}
for rep in range(8):
    for m in (list(sup) if rep % 2 == 0 else list(sup)[::-1]):
        r = go(m); tot[m] += r.seconds; prop[m] += r.stage_seconds["propose"]
for m in sup:
    t = np.array(times[m]) * 1e6
    t = t[t < 3 * np.median(t)]  # drop each call's first (prompt) verify
    print(f"{m:13s} run {tot[m] / 8 * 1e3:7.1f} ms  propose {prop[m] / 8 * 1e3:5.1f} ms  verify us median {np.median(t):7.1f} mean {t.mean():7.1f} p10 {np.percentile(t, 10):7.1f} p90 {np.percentile(t, 90):7.1f}")
