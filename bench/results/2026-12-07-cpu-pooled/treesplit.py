import sys, time, collections
from specdec.app import harness
from specdec.app.evaluation import load_eagle
from specdec.app.models import load_model, load_tokenizer
import specdec.suppliers.eagle as eg, specdec.suppliers.draft as dr
pset, bs, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
sup = harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
T = collections.defaultdict(float); N = collections.defaultdict(int); on = [False]
def wrap(obj, name, label=None):
    label = label or name
    f = getattr(obj, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k)
        if on[0]: T[label] += time.perf_counter() - t; N[label] += 1
        return r
    setattr(obj, name, g)
wrap(eg.EagleSupplier, "propose"); wrap(dr.DraftSupplier, "_select")
for n in ["catch_up", "forward_layer", "begin_tree", "commit"]: wrap(eg.EagleRunner, n, "runner." + n)
def go():
    return harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(); on[0] = True
for r in range(rounds): res = go()
steps = N["propose"]
for k in sorted(T, key=lambda k: -T[k]): print(f"  {k:28s} {T[k] / steps * 1e3:7.3f} ms/step  calls/step {N[k] / steps:.2f}")
