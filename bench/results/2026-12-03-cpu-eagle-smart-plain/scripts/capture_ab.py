"""Is the feature capture what slows eagle-smart's plain steps? AR, AR with the head's features captured
(and kept, as the head's backlog keeps them), eagle-smart in plain mode; interleaved rounds."""
import sys
from specdec import harness
from specdec.evaluation import load_eagle, smart_profile
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
cap = harness.make_supplier("ar", None)
cap.feature_layers = lambda: head.feature_layers
keep = harness.make_supplier("ar", None)
keep.feature_layers = lambda: head.feature_layers
kept = []
_commit = keep.commit
def commit(acc, _c=_commit):
    kept.append((acc.features, acc.prompt_features))
    return _c(acc)
keep.commit = commit
_start = keep.start
def start(state, _s=_start):
    kept.clear()
    return _s(state)
keep.start = start
s = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head)
s.planner.margin = 9.0
runs = [harness.Run("ar", harness.make_supplier("ar", None), None), harness.Run("ar+capture", cap, None),
        harness.Run("ar+capture+keep", keep, None), harness.Run("eagle-smart-plain", s, None)]
for r in runs:
    harness.run_method(target, r.supplier, prompts[:b], batch_size=b, max_new_tokens=4, method=r.method, prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=None)
res = harness.run_interleaved(target, runs, prompts, batch_size=b, max_new_tokens=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, prompt_set="humaneval", repeats=4)
ar = res[0][0]
for r, (m, _) in zip(runs, res):
    print(f"{r.method:20s} {m.tokens_per_second:6.1f} tok/s paired {harness.paired_speedup(m, ar) or 1:.3f}", [round(x, 3) for x in m.round_seconds], {k: round(v, 4) for k, v in m.stage_seconds.items()})
