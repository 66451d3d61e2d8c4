"""The node rule's marginal nodes at a fixed cap (planner=0): per node rank within its row (by calibrated path
probability, the rule's order), the mean calibrated path probability the rule priced it at against how often the
target accepted it, over drafting steps in the loop."""
import sys, collections, numpy as np
from specdec.app import harness
from specdec.app.evaluation import load_eagle, smart_profile
from specdec.app.models import load_model, load_tokenizer
import specdec.suppliers.smart as sm
from specdec.estimates import tested_nodes
pset, bs, rounds, opts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
tok = load_tokenizer("demo-target", "--target")
target = load_model("demo-target", dtype="float32", device="cpu", what="--target")
head = load_eagle(None, target, "demo-target")
cost = smart_profile(None, target, head, [1, 4, 8, 16])
sup = harness.make_supplier("eagle-smart", None, cost=cost, eagle=head, smart=harness.smart_variant(opts))
prompts = harness.fit(harness.encode(tok, harness.load_prompts(pset, 16), False), target, 64)[:16]
P = collections.defaultdict(list); A = collections.defaultdict(list); on = [False]
orig = sm.SmartSupplier.commit
def commit(self, acc):
    t = self._tree
    if on[0] and t is not None:
        cal = self.planner.calibration
        tokens, parents, size, edge = (np.asarray(x) for x in (t.tokens, t.parents, t.size, t.edge))
        _, accepted = tested_nodes(tokens, parents, size, acc.host_tokens, acc.host_num_accepted)
        for b in range(tokens.shape[0]):
            n = int(size[b]); path = np.ones(n)
            for i in range(1, n):
                path[i] = path[parents[b, i]] * float(cal(np.array([edge[b, i]]))[0])
            order = np.argsort(-path[1:], kind="stable") + 1
            for rank, i in enumerate(order, 1):
                P[rank].append(path[i]); A[rank].append(bool(accepted[b, i]))
    return orig(self, acc)
sm.SmartSupplier.commit = commit
go = lambda: harness.run_method(target, sup, prompts, batch_size=bs, max_new_tokens=64, method="x", prompt_set=pset, pad_token_id=tok.pad_token_id, eos_token_id=None)
go(); on[0] = True
for _ in range(rounds): r = go()[0]
print(f"{pset} b{bs} {opts}: accepted {r.mean_accepted_length:.2f} tree {r.mean_tree_size:.2f}")
for rank in sorted(P):
    if len(P[rank]) >= 20:
        print(f"rank {rank:2d}: nodes {len(P[rank]):5d}  calibrated path P {np.mean(P[rank]):.3f}  accepted {np.mean(A[rank]):.3f}")
