"""cProfile of EAGLE-3 + SMART vs EAGLE 4:2:8 at HumanEval b4 (all 4 batches, one warm pass, one profiled)."""
import cProfile, pstats, sys, time, io, torch
from specdec import SpeculativeGenerator
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
B = 4
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
sups = {"eagle-smart": harness.make_supplier("eagle-smart", None, eagle=head, cost=smart_profile(None, target, head, [B])),
        "eagle": harness.make_supplier("eagle", None, eagle=head, eagle_shape=(4, 2, 8))}
which = sys.argv[1]
gen = SpeculativeGenerator(target, sups[which])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
batches = harness._batches(prompts, B, tok.pad_token_id, target.device)
def run():
    st = []
    for _, ids, mask in batches:
        out = gen.generate(ids, attention_mask=mask, max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        st.append(out.stats)
    return st
with torch.inference_mode():
    run()
    t0 = time.perf_counter(); run(); print("plain wall", time.perf_counter() - t0)
    pr = cProfile.Profile(); t0 = time.perf_counter(); pr.enable(); st = run(); pr.disable()
    print("profiled wall", time.perf_counter() - t0, "steps", sum(s.steps for s in st))
    for s in st: print({k: round(v, 3) for k, v in s.stage_seconds.items()}, s.steps)
    s = io.StringIO(); ps = pstats.Stats(pr, stream=s); ps.sort_stats("cumulative").print_callees("forward_layer|eagle.py:274|catch_up|_logits|eagle.py:.*forward"); print(s.getvalue()[:20000])
