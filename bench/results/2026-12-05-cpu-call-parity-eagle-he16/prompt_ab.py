"""A/B of the prompt step at HumanEval b16: AR, AR + feature capture, eagle-smart."""
import sys, time, numpy as np, torch
from specdec import SpeculativeGenerator
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec.records import provenance
import json

B = int(sys.argv[1]) if len(sys.argv) > 1 else 16
R = int(sys.argv[2]) if len(sys.argv) > 2 else 8
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
es = harness.make_supplier("eagle-smart", None, eagle=head, cost=smart_profile(None, target, head, [B]))
cap = SpeculativeGenerator(target, harness.make_supplier("ar", None))
layers = es.feature_layers()
print("layers", layers, "max_tree", es.max_tree_size())
loops = {"ar": SpeculativeGenerator(target, harness.make_supplier("ar", None)), "ar+cap": cap,
         "eagle-smart": SpeculativeGenerator(target, es)}
cap.verifier.request_features(layers)
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", B), False), target, 64)
(_, ids, mask), = harness._batches(prompts, B, tok.pad_token_id, target.device)[:1]
print("ids", tuple(ids.shape))
res = {k: [] for k in loops}
with torch.inference_mode():
    for r in range(R):
        names = list(loops) if r % 2 == 0 else list(loops)[::-1]
        for n in names:
            t0 = time.perf_counter()
            out = loops[n].generate(ids, attention_mask=mask, max_new_tokens=2, eos_token_id=tok.eos_token_id,
                                    pad_token_id=tok.pad_token_id)
            wall = time.perf_counter() - t0
            res[n].append((wall, out.stats.step_seconds[0]))
print(json.dumps(provenance()))
if len(sys.argv) > 3:
    json.dump(dict(environment=provenance(), batch=B, rounds=R, width=int(ids.shape[1]), layers=list(layers), calls={n: [dict(wall=w, prompt_step=p) for w, p in v] for n, v in res.items()}), open(sys.argv[3], "w"), indent=1)
for n, v in res.items():
    v = np.array(v)
    print(f"{n:12s} wall min {v[:,0].min():.4f} med {np.median(v[:,0]):.4f}  step0 min {v[:,1].min():.4f} med {np.median(v[:,1]):.4f}  all {np.round(v[:,1],3).tolist()}")
