"""torch.profiler: AR vs AR with the head's features captured, alternating 4 times; op self-times summed."""
import sys, collections
from torch.profiler import profile, ProfilerActivity
from specdec import harness
from specdec.evaluation import load_eagle
from specdec.models import load_model, load_tokenizer
b = int(sys.argv[1])
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
cap = harness.make_supplier("ar", None)
cap.feature_layers = lambda: head.feature_layers
sups = {"ar": harness.make_supplier("ar", None), "capture": cap}
tot = {k: collections.Counter() for k in sups}; cnt = {k: collections.Counter() for k in sups}; secs = collections.Counter()
for rep in range(4):
    for name, sup in sups.items():
        run = lambda: harness.run_method(target, sup, prompts, batch_size=b, max_new_tokens=64, method=name, prompt_set="humaneval", pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
        run()
        with profile(activities=[ProfilerActivity.CPU]) as p:
            res, _ = run()
        secs[name] += res.stage_seconds["verify"]
        for e in p.key_averages():
            tot[name][e.key] += e.self_cpu_time_total; cnt[name][e.key] += e.count
print("verify seconds (4 runs):", dict(secs))
a, q = tot["ar"], tot["capture"]
print("total self ms", sum(a.values()) / 1e3, sum(q.values()) / 1e3)
for k in sorted(set(a) | set(q), key=lambda k: -abs(q[k] - a[k]))[:25]:
    print(f"{k[:45]:45s} ar {a[k]/1e3:8.1f} ms x{cnt['ar'][k]:6d}  capture {q[k]/1e3:8.1f} ms x{cnt['capture'][k]:6d}")
