"""The shipped EAGLE-3 head's 4:2:8 tree with its cold window W (`EagleRunner`'s `window`): accepted length and
speedup over AR, interleaved rounds (order reversed every other round) in one process.

usage: python window.py SET BATCHES ROUNDS WINDOWS     e.g. window.py spec_bench 1,4,8,16 4 none,64,128"""
import sys
import numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer

pset, batches, rounds = sys.argv[1], [int(b) for b in sys.argv[2].split(",")], int(sys.argv[3])
windows = [None if w == "none" else int(w) for w in sys.argv[4].split(",")]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
sups = {"ar": harness.make_supplier("ar", None)}
for w in windows:
    s = harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))
    s.runner.window = w
    sups[f"W{w}"] = s
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
for bs in batches:
    res, outs = {k: [] for k in sups}, {}
    for r in range(rounds):
        for name in (list(sups) if r % 2 == 0 else list(sups)[::-1]):
            out, toks = harness.run_method(target, sups[name], prompts, batch_size=bs, max_new_tokens=64, method=name,
                                           prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
            res[name].append((out.seconds, out.mean_accepted_length))
            outs[name] = toks
    ar = np.array([x[0] for x in res["ar"]])
    for name in sups:
        s = np.array([x[0] for x in res[name]])
        print(f"{pset} b{bs} {name:6s} accepted {res[name][0][1]:.3f}  speedup paired median {np.median(ar / s):.3f}"
              f"  best-of {ar.min() / s.min():.3f}  identical to AR {outs[name] == outs['ar']}", flush=True)
