"""EAGLE-3 + SMART against the head's 4:2:8 tree at one batch size, step by step: per step the rows' tokens,
the padded tree width and the stage seconds (`Stats.record`), so the difference in speed splits into steps a
call (how far the batch moves per step) and seconds a step (propose, verify). Planner kept across passes,
each method against AR in the same pass, orders alternating.

    python steps.py SET BATCH PASSES PROMPTS
"""
import sys, collections, numpy as np
import specdec.generate as G
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
pset, bs, passes, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:n]
sups = {"ar": harness.make_supplier("ar", None),
        "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "eagle-smart": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)}
log, cur = collections.defaultdict(list), [None]
real = G.Stats.record
def record(self, accepted, tree_size, new_tokens, **stage):
    log[cur[0]].append((np.asarray(accepted).copy(), tree_size, new_tokens, dict(stage)))
    return real(self, accepted, tree_size, new_tokens, **stage)
G.Stats.record = record
def go(m):
    cur[0] = m
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for m in sups:
    go(m)
log.clear()
secs = collections.defaultdict(list)
for p in range(passes):
    for m in (list(sups) if p % 2 == 0 else list(sups)[::-1]):
        secs[m].append(go(m).seconds)
ar = np.array(secs["ar"])
print(f"{pset} batch {bs}, {passes} passes of {n} prompts, 64 new tokens")
for m in sups:
    steps = log[m]
    drafting = [s for s in steps if s[1] > 1]
    per_pass = len(steps) / passes
    sec = np.array([sum(s[3].values()) for s in steps])
    prop = np.array([s[3].get("propose", 0.0) for s in steps]); ver = np.array([s[3].get("verify", 0.0) for s in steps])
    rows = np.concatenate([s[0] for s in drafting]) if drafting else np.zeros(1)
    print(f"{m:12s} speedup median {np.median(ar / np.array(secs[m])):.3f}  steps a pass {per_pass:6.1f}  "
          f"drafting {len(drafting) / passes:5.1f}  s/step {sec.mean() * 1e3:6.2f} ms (propose {prop.mean() * 1e3:5.2f}, "
          f"verify {ver.mean() * 1e3:5.2f})  drafting steps: width {np.mean([s[1] for s in drafting]) if drafting else 1:4.1f}, "
          f"row tokens mean {rows.mean():.2f} min-of-batch {np.mean([s[0].min() for s in drafting]) if drafting else 1:.2f}, "
          f"s/step {np.mean([sum(s[3].values()) for s in drafting]) * 1e3 if drafting else 0:6.2f} ms "
          f"(propose {np.mean([s[3].get('propose', 0.0) for s in drafting]) * 1e3 if drafting else 0:5.2f}, "
          f"verify {np.mean([s[3].get('verify', 0.0) for s in drafting]) * 1e3 if drafting else 0:5.2f}), "
          f"plain steps {sum(1 for s in steps if s[1] == 1) / passes:5.1f} a pass at "
          f"{np.mean([sum(s[3].values()) for s in steps if s[1] == 1]) * 1e3:6.2f} ms")
