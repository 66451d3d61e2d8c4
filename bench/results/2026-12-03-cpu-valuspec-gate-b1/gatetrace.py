"""Trace CostGate decisions during the ValuSpec protocol (retrieval, HumanEval b1)."""
import sys, json, runpy
import numpy as np
from specdec import gate as G
log = []
_plan, _record = G.CostGate.plan, G.CostGate.record
def plan(self, tree, state):
    p = _plan(self, tree, state)
    e = self.est
    log.append(dict(kind="plan", W=int(tree.size), score=p.score, probe=p.probe, saving=round(p.saving * 1e3, 3), cost=round(p.cost * 1e3, 3),
                    full=round(self.verify(tree.size, whole=True) * 1e3, 3), v1=round(self.verify(1) * 1e3, 3),
                    whole=None if e.whole is None else round(e.whole, 3), cut=round(e.cut, 3), r=round(e.width_ratio, 3),
                    ret=None if e.retained is None else round(e.retained, 3), scoring=None if e.scoring is None else round(e.scoring, 3)))
    return p
def record(self, step, plan, proposed):
    log.append(dict(kind="rec", score=plan.score, width=step.width, proposed=proposed, verify=round(step.verify * 1e3, 3),
                    filter=round(step.filter * 1e3, 3), propose=round(step.propose * 1e3, 3), acc=np.asarray(step.accepted).tolist()))
    return _record(self, step, plan, proposed)
G.CostGate.plan, G.CostGate.record = plan, record
sys.argv = ["valuspec_protocol.py"] + sys.argv[2:]
try:
    runpy.run_path("bench/valuspec_protocol.py", run_name="__main__")
finally:
    json.dump(log, open(sys.argv_out if hasattr(sys, "argv_out") else "/tmp/gatetrace.json", "w"))
