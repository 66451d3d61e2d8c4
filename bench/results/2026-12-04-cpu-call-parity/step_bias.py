import sys, numpy as np, torch
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
from specdec import SpeculativeGenerator
from specdec.planner import StepPlanner
B = int(sys.argv[1]); opts = eval(sys.argv[2]) if len(sys.argv) > 2 else {}
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [B])
prompts = harness.fit(harness.encode(tok, harness.load_prompts("humaneval", 16), False), target, 64)
sup = harness.make_supplier("eagle-smart", None, eagle=head, cost=cost, smart=opts)
rows = []
op, orec = StepPlanner.plan, StepPlanner.record
cur = {}
def plan(self, backlog=1, context=None, cold=False):
    p = op(self, backlog, context, cold)
    c, e = self.costs, self.depths.estimates()
    d = p.depth
    cur.clear()
    if d:
        cur.update(d=d, rest=c.rest, verify=float(c.verify(e.width, context)[d]), catch=float(c.catch_up(backlog)),
                   layers=float(e.forwards[d] * c.layer(e.layer_width)), total=p.seconds, width=float(e.width[d]), ar=c.ar(context))
    return p
def record(self, step, facts):
    self._last_tokens_before = self._last_tokens
    orec(self, step, facts)
    if cur and facts is not None:
        rows.append(dict(cur, m_prop=step.propose, m_ver=step.verify, m_rest=step.filter + step.commit, m_tot=step.seconds,
                         m_width=step.width, fw=facts.forwards, cap=facts.cap, steady=facts.backlog <= self._last_tokens_before))
StepPlanner.plan, StepPlanner.record = plan, record
loop = SpeculativeGenerator(target, sup)
batches = harness._batches(prompts, B, tok.pad_token_id, target.device)
with torch.inference_mode():
    for r in range(2):
        for i, ids, mask in batches:
            loop.generate(ids, attention_mask=mask, max_new_tokens=64, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
allr = rows[len(rows)//3:]
for name, sel in (("steady", True), ("cold", False)):
    rr = [r for r in allr if r["steady"] == sel]
    if rr: print(name, len(rr), "verify pred %.2f meas %.2f  width %.2f  propose meas %.2f pred %.2f" % (np.mean([r["verify"] for r in rr])*1e3, np.mean([r["m_ver"] for r in rr])*1e3, np.mean([r["m_width"] for r in rr]), np.mean([r["m_prop"] for r in rr])*1e3, np.mean([r["catch"]+r["layers"] for r in rr])*1e3))
rows = allr
c = sup.planner.costs
print("table ms", np.round(np.array(c._table[1:13]) * 1e3, 1).tolist())
print("base  ms", np.round(np.array(c._base[1:13]) * 1e3, 1).tolist())
print("ratio", np.round(c.verify_ratio[:12], 2).tolist(), "level", round(c.verify_level, 2))
print("seen", c.verify_seen[:12].tolist())
ws = np.array([r["m_width"] for r in allr]); vs = np.array([r["m_ver"] for r in allr])
print("measured by width", {int(w): (int((ws == w).sum()), round(float(np.median(vs[ws == w])) * 1e3, 1)) for w in np.unique(ws)})
k = lambda key: np.mean([r[key] for r in rows]) * (1e3 if key not in ("width", "m_width", "fw", "cap", "d") else 1)
print("n", len(rows), "cap", k("d"))
print("pred: rest %.2f verify %.2f (width %.2f) catch %.2f layers %.2f total %.2f ar %.2f" % tuple(k(x) for x in ("rest", "verify", "width", "catch", "layers", "total", "ar")))
print("meas: propose %.2f verify %.2f (width %.2f) rest %.2f total %.2f forwards %.2f" % tuple(k(x) for x in ("m_prop", "m_ver", "m_width", "m_rest", "m_tot", "fw")))
