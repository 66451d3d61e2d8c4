"""Per round and call: AR, the 4:2:8 tree and EAGLE-3 + SMART back to back (order alternating); SMART's steps
by kind. Then over the warm rounds (1..): calls SMART drafted throughout (no plain step) against the tree, and the
rest.  usage: steptrace3.py SET BATCH ROUNDS"""
import sys, numpy as np
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
        "es": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
batches = [prompts[i:i + bs] for i in range(0, len(prompts), bs)]
log = []
orig = P.StepPlanner.record
def record(self, step, facts):
    if self._plan is not None: log.append(self._plan)
    return orig(self, step, facts)
P.StepPlanner.record = record
rows = []
for r in range(rounds):
    for bi, b in enumerate(batches):
        names = list(sups) if (r + bi) % 2 == 0 else list(sups)[::-1]
        t = {}
        for name in names:
            log.clear()
            out = harness.run_method(target, sups[name], b, batch_size=bs, max_new_tokens=64, method=name, prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
            t[name] = out.seconds
            if name == "es":
                desc = "".join(("W" if q.warmup else "P" if q.probe else str(q.depth)) if q.depth else ("p" if q.probe else ".") for q in log)
        plain = desc.count(".") + desc.count("p"); probes = desc.count("P")
        rows.append((r, bi, t["ar"], t["tree"], t["es"], plain, probes, desc))
        print(f"round {r} call {bi}: tree x{t['ar']/t['tree']:.3f} es x{t['ar']/t['es']:.3f} es/tree {t['tree']/t['es']:.3f} plain {plain} probes {probes} {desc}", flush=True)
warm = [x for x in rows if x[0] >= 1]
for label, sel in (("drafting throughout", [x for x in warm if x[5] == 0]), ("with plain steps", [x for x in warm if x[5] > 0])):
    if sel:
        print(f"{label}: {len(sel)} calls, tree/ar {sum(x[2] for x in sel)/sum(x[3] for x in sel):.3f} es/ar {sum(x[2] for x in sel)/sum(x[4] for x in sel):.3f} es vs tree {sum(x[3] for x in sel)/sum(x[4] for x in sel):.3f}, probes {sum(x[6] for x in sel)}")
print(f"all warm: tree/ar {sum(x[2] for x in warm)/sum(x[3] for x in warm):.3f} es/ar {sum(x[2] for x in warm)/sum(x[4] for x in warm):.3f}")
