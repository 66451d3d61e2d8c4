"""Per call: AR, the 4:2:8 tree and EAGLE-3 + SMART (default) back to back, ROUNDS rounds; the last round's SMART
steps traced.  usage: steptrace2.py SET BATCH ROUNDS   (SMART= smart variant spec)"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec import planner as P
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sups = {"ar": harness.make_supplier("ar", None),
        "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "es": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(os.environ.get("SMART", "default")))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
batches = [prompts[i:i + bs] for i in range(0, len(prompts), bs)]
log = []
orig = P.StepPlanner.record
def record(self, step, facts):
    if self._plan is not None: log.append((self._plan, step.seconds, float(np.mean(step.accepted)), step.width))
    return orig(self, step, facts)
P.StepPlanner.record = record
res = {}
for r in range(rounds):
    for bi, b in enumerate(batches):
        names = list(sups) if (r + bi) % 2 == 0 else list(sups)[::-1]
        for name in names:
            log.clear()
            out = harness.run_method(target, sups[name], b, batch_size=bs, max_new_tokens=64, method=name, prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
            res.setdefault((bi, name), []).append((out.seconds, out.mean_accepted_length))
            if name == "es":
                res[(bi, "log")] = list(log)
                lg = list(log)
                desc = "".join(("W" if q.warmup else "P" if q.probe else str(q.depth)) if q.depth else ("p" if q.probe else ".") for q, *_ in lg)
                turns = [(i, round(lg[i - 1][0].gain, 3), round(q.gain, 3)) for i, (q, *_) in enumerate(lg) if i and q.depth == 0 and lg[i - 1][0].depth and not q.probe]
                print(f"round {r} call {bi}: {desc}  plain turns (step, prev gain, gain): {turns}", flush=True)
tot = {n: 0.0 for n in sups}
for bi, b in enumerate(batches):
    ar = np.median([x[0] for x in res[(bi, 'ar')]])
    line = [f"call {bi} prompts {min(map(len, b))}-{max(map(len, b))}"]
    for name in sups:
        s = np.median([x[0] for x in res[(bi, name)]]); tot[name] += s
        line.append(f"{name} {s*1e3:.0f}ms x{ar/s:.3f} acc {res[(bi, name)][-1][1]:.2f}")
    print(" | ".join(line))
    lg = res[(bi, "log")]
    print("   ", "".join(("W" if q.warmup else "P" if q.probe else str(q.depth)) if q.depth else ("p" if q.probe else ".") for q, *_ in lg))
    dr = [(q, s, m, w) for q, s, m, w in lg if q.depth]
    if dr:
        print(f"    drafted {len(dr)} mean {1e3*np.mean([s for _, s, _, _ in dr]):.1f}ms (plan {1e3*np.mean([q.seconds for q, *_ in dr]):.1f}) tok {np.mean([m for _, _, m, _ in dr]):.2f} (plan {np.mean([q.length for q, *_ in dr]):.2f}) width {np.mean([w for *_, w in dr]):.1f}; plain {len(lg)-len(dr)} median {1e3*np.median([s for q, s, _, _ in lg if not q.depth] or [0]):.1f}ms")
print("total", {n: round(v * 1e3) for n, v in tot.items()}, "es/ar", round(tot["ar"] / tot["es"], 3), "tree/ar", round(tot["ar"] / tot["tree"], 3))
