import sys, cProfile, pstats, io, time
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
bs = int(sys.argv[1]); variant = sys.argv[2] if len(sys.argv) > 2 else "smart"
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
if variant == "smart":
    s = harness.make_supplier("eagle-smart", None, cost=smart_profile(None, target, head, [bs]), eagle=head, smart=dict(planner=False))
else:
    s = harness.make_supplier("eagle", None, eagle=head, eagle_shape=(5, 2, 10))
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)[:4 * bs]
def go():
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set="humaneval",
                           pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
for _ in range(2): go()
t = time.perf_counter(); r = go(); print("seconds", round(time.perf_counter() - t, 3), r.stage_seconds, "accepted", round(r.mean_accepted_length, 2), "tree", round(r.mean_tree_size, 1))
pr = cProfile.Profile(); pr.enable(); go(); pr.disable()
st = io.StringIO(); pstats.Stats(pr, stream=st).sort_stats("cumulative").print_stats(45); print(st.getvalue())
