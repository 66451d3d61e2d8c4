"""A/B in one process: AR, the head's 4:2:8 tree, EAGLE-3 + SMART pricing every call at its batch size's spread
("old": planner.call_spread = False) and correcting it by the call's rows ("new": the default since it landed);
the batch sizes in order with the same suppliers (as bench/eagle.sh), ROUNDS interleaved rounds each (order
reversed every other round); per cell: paired median / best-of speedup, mean accepted length, drafting steps.
usage: ab.py SET BATCHES ROUNDS   (OLD=, NEW=: smart options of either side)"""
import sys, os, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
pset, batches, rounds = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
opts_old, opts_new = os.environ.get("OLD", "default"), os.environ.get("NEW", "default")
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
def es(old):
    s = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(opts_old if old else opts_new))
    s.planner.call_spread = not old
    return s
sups = {"ar": harness.make_supplier("ar", None), "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "old": es(True), "new": es(False)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
for bs in batches:
    res = {k: [] for k in sups}
    for r in range(rounds):
        names = list(sups) if r % 2 == 0 else list(sups)[::-1]
        for name in names:
            out, toks = harness.run_method(target, sups[name], prompts, batch_size=bs, max_new_tokens=64, method=name, prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
            res[name].append((out.seconds, out.mean_accepted_length, out.plan["steps_drafted"] if out.plan else 0))
    ar = np.array([x[0] for x in res["ar"]])
    line = [f"{pset} b{bs}"]
    for name in sups:
        s = np.array([x[0] for x in res[name]])
        line.append(f"{name} {np.median(ar / s):.3f}/{ar.min() / s.min():.3f} acc {np.mean([x[1] for x in res[name]]):.2f} dr {sum(x[2] for x in res[name])}")
    print(" | ".join(line), flush=True)
