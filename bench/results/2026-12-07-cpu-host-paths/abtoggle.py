"""In one process: the EAGLE tree with the CPU's numpy paths and narrow ranking (new) against the torch paths and
the widened ranking (old), interleaved rounds, AR beside them.

    python abtoggle.py SET BATCH DEPTH:TOPK:NODES ROUNDS     # e.g. spec_bench 1 4:2:8 12
"""
import sys, time, numpy as np, torch, importlib
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec import tree as TR, sampling as SA
from specdec.suppliers import eagle as E
TA = importlib.import_module("specdec.ops.tree_attention")
pset, bs, shape = sys.argv[1], int(sys.argv[2]), tuple(int(x) for x in sys.argv[3].split(":"))
rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 6
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
meta_new = TR.TreeBatch.__dict__["_kernel_metadata"].func
host_mask = TA._tree_attention_mask_host
acc_host = SA._accept_predicted_host
torch_acc = SA._accept_predicted_torch  # the torch rule GPUs run
ids_prop = E.EagleRunner.draft_ids
def set_mode(new):
    TR.TreeBatch.__dict__["_kernel_metadata"].func = meta_new if new else (lambda self: None)
    TA._tree_attention_mask_host = host_mask if new else TA.tree_attention_mask
    SA._accept_predicted_host = acc_host if new else torch_acc
    E.EagleRunner.draft_ids = ids_prop if new else property(lambda self: None)
sups = {"ar": harness.make_supplier("ar", None), "eagle": harness.make_supplier("eagle", None, eagle=head, eagle_shape=shape)}
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)
def go(m):
    return harness.run_method(target, sups[m], prompts, batch_size=bs, max_new_tokens=64, method=m, prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
T = {k: [] for k in ("ar", "old", "new")}
acc = {}
for mode in ("old", "new"):
    set_mode(mode == "new"); go("eagle")
go("ar")
for r in range(rounds):
    order = ["ar", "old", "new"] if r % 2 == 0 else ["new", "old", "ar"]
    for k in order:
        if k == "ar":
            set_mode(True); res = go("ar")
        else:
            set_mode(k == "new"); res = go("eagle"); acc[k] = res.mean_accepted_length
        T[k].append(res.seconds)
ar = np.array(T["ar"])
for k in ("old", "new"):
    t = np.array(T[k])
    print(f"{k}: median {np.median(t):.3f}s best {t.min():.3f}s  speedup(best/best) {ar.min() / t.min():.3f}  paired-median {np.median(ar / t):.3f}  acc {acc[k]:.2f}")
r = np.array(T["new"]) / np.array(T["old"]); print("new/old per round", np.round(r, 3), "median", round(float(np.median(r)), 3))
