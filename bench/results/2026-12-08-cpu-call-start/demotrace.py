"""Demo-like cell: fresh supplier, 4-token warm-up call (WARM=1), then the 64-token call vs AR; trace each step.
   python demotrace.py BATCH PASSES smart|eagle-smart   (PSET=humaneval, N=prompts)"""
import sys, os, time, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import smart_profile, load_eagle
from specdec.app.models import load_model, load_tokenizer
from specdec import planner as P
bs, passes, method = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
WARM = int(os.environ.get("WARM", "1")); PSET = os.environ.get("PSET", "humaneval"); N = int(os.environ.get("N", bs))
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
draft = load_model("demo-draft", dtype="float32", device="cpu", what="--draft")
cost = smart_profile(None, target, draft if method == "smart" else head, [1, 4])
prompts = harness.fit(harness.encode(tok, harness.load_prompts(PSET, max(N, 4)), False), target, 64)[:N]
ar = harness.make_supplier("ar", None)
def go(s, m, n=64):
    return harness.run_method(target, s, prompts, batch_size=bs, max_new_tokens=n, method=m, prompt_set=PSET,
                              pad_token_id=tok.pad_token_id, eos_token_id=None)[0]
go(ar, "ar")
log = []
orig = P.StepPlanner.record
def record(self, step, facts):
    if self._plan is not None: log.append((self._plan, step.seconds, float(np.mean(step.accepted)), step.width))
    return orig(self, step, facts)
P.StepPlanner.record = record
sp = []
for p in range(passes):
    es = harness.make_supplier(method, draft, cost=cost, eagle=head)
    log.clear()
    if WARM: go(es, "es", 4)
    print("  warm-up call:", [(q.depth, q.probe, q.warmup, round(q.gain, 2), round(s * 1e3, 1), m) for q, s, m, w in log], "drafting", es.planner.state.drafting, "quiet", es.planner.state.quiet)
    log.clear()
    if p % 2 == 0:
        a = go(ar, "ar"); e = go(es, "es")
    else:
        e = go(es, "es"); a = go(ar, "ar")
    sp.append(a.seconds / e.seconds)
    desc = "".join(("W" if q.warmup else "P" if q.probe else "D") if q.depth else ("p" if q.probe else ".") for q, *_ in log)
    print(f"pass {p}: {a.seconds/e.seconds:.3f} ar {a.seconds*1e3:.0f}ms es {e.seconds*1e3:.0f}ms steps {len(log)} {desc}")
    dr = [(s, m) for q, s, m, w in log if q.depth]; pl = [s for q, s, m, w in log if not q.depth]
    if dr: print(f"   drafted {len(dr)} {1e3*sum(s for s,_ in dr):.0f}ms mean {1e3*np.mean([s for s,_ in dr]):.1f} tok {np.mean([m for _,m in dr]):.2f}; caps {[q.depth for q,*_ in log if q.depth]}")
    print(f"   plain {len(pl)} {1e3*np.sum(pl):.0f}ms median {1e3*np.median(pl):.2f}; gains {[round(q.gain,2) for q,*_ in log if q.gain][:12]}")
print("median", round(float(np.median(sp)), 3), np.round(sp, 3))
