"""Per batch (call): AR against the 4:2:8 tree and SMART drafting every step (cap 4, alpha 2), the same rows back to
back, medians over ROUNDS. usage: percall.py SET BATCH ROUNDS"""
import sys, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sups = {"ar": harness.make_supplier("ar", None),
        "tree": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8)),
        "es": harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant("planner=0,max_depth=4,alpha=2"))}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
batches = [prompts[i:i + bs] for i in range(0, len(prompts), bs)]
res = {}
for r in range(rounds):
    for bi, b in enumerate(batches):
        for name, sup in sups.items():
            out = harness.run_method(target, sup, b, batch_size=bs, max_new_tokens=64, method=name, prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
            st = out.steps_ar + out.steps_drafted if hasattr(out, "steps_ar") and out.steps_ar is not None else None
            res.setdefault((bi, name), []).append((out.seconds, out.mean_accepted_length, out.stage_seconds))
for bi, b in enumerate(batches):
    lens = [len(p) for p in b]
    line = [f"batch {bi} prompts {min(lens)}-{max(lens)}"]
    ar = np.median([x[0] for x in res[(bi, 'ar')]])
    for name in sups:
        s = np.median([x[0] for x in res[(bi, name)]])
        acc = res[(bi, name)][0][1]
        line.append(f"{name} {s*1e3:.0f} ms acc {acc:.2f} x{ar/s:.3f}")
    print(" | ".join(line))
for bi in range(len(batches)):
    for name in sups:
        st = res[(bi, name)][-1][2]
        print(bi, name, {k: round(v * 1e3, 1) for k, v in st.items()})
