"""SMART: hardware-aware draft trees, priced by what a whole step costs, that never plan a losing step.

Each step, before the draft runs, the step planner (`specdec.planner`) picks a depth cap D* from 0 to
`max_depth` that maximises the predicted speedup ``L(D) c_T / C_step(D)`` (the step cost model:
`specdec.cost`); D* = 0 is a plain AR step in which the draft does not run at all (its backlog grows and the
next drafting step catches up in one forward). When it drafts, the draft catches up, then for depth
d = 1, 2, ... D*: the top-`topk` children of every frontier node come to the host (`smart_host`) and
join their row's pool with their calibrated path probability P (the planner's `Calibration` of the draft's
probabilities), and each row's tree is the longest prefix of its pool, in P order, passing the marginal
test::

    alpha * dL(u) * C(|T|) > L(T) * dC(|T|)       dL(u) = P(u) / |paths| ("paper") or P(u) ("expected")

with C the step's cost so far (loop, catch-up, the layers forwarded) plus verification at |T| nodes and
|paths| the tree's current leaves, updated candidate by candidate. That is ``selection="global"`` (the
default: `smart_host.PoolTree`, one ranking over every depth, as EAGLE-2 re-ranks its pool);
``selection="layered"`` keeps each layer's passing prefix before the next layer is drafted (`HostTree`;
`early_stop=False`: `ops.smart_expand` on the device, |paths| held per layer), so its first layers are
tested against a small L and keep shallow siblings a deeper candidate would have beaten. With
``padding_aware`` (batches) a node that widens the batch's padded width W pays a new column for the whole
batch and is weighed against the batch's summed L; one under W pays only its share of its column. Then
the next layer's forward runs only if the best its children could add (their summed path probability is
at most their parents': the frontier's mass) pays for the forward and one more verified column; it
forwards each row's best candidates of the newest layer (layered: of those kept), at most `frontier`.

Worked example (one row, topk 2, frontier 2, a cap of 3, layered): the root's children a (P .6) and b
(P .3) pass, the tree is {root, a, b}; the frontier {a, b} has mass .9, which pays for a layer; a and b are
forwarded; their children aa (.36), ab (.18), ba (.15), bb (.09) are sorted and the test keeps aa only;
the frontier {aa} (mass .36) no longer pays for a forward: the tree is root -> {a -> aa, b}, 4 nodes.
Pooled, the last ranking reads a (.6), aa (.36), b (.3), ab (.18), ...: b is tested after aa, against
L = 1.96 rather than 1.6.

Host syncs: with ``early_stop=True`` (the default over a draft model) one per layer, deliberate, reading the
numbers the planner decides on (does any row grow, the tree's width, the kept and frontier probability
mass, the rows' L); they save every forward that would not pay. ``early_stop=False`` (the default over an
EAGLE head) drafts D* layers on the device as EAGLE-2 does (each layer forwards the `frontier` candidates
of best raw path probability) and brings the whole pool to the host once, where the rule ranks it as
above: the planner's cap alone sets the depth, and nothing runs on the host between the head's forwards
(on the 2-core CPU that host work, ~0.35 ms a layer at batch 4, cost more than the layers it saved over
the head, whose forward is cheap: docs/smart.md, "Inside a tree"). With ``selection="layered"`` it is
`ops.smart_expand`'s rule on the device, one sync at the end.

Rows: a finished row's candidates join no tree (the loop cuts its tree to the root; priced in, they bought
columns for the batch), and a row's nodes deeper than the tokens it may still emit are no candidates
(`smart_rule.RowWeights`; the global selection).
"""


from __future__ import annotations

from dataclasses import replace
from typing import Callable

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from ..checks import as_int
from ..cost import CostModel, check_compatible
from ..cost_by_batch import CostsByBatch
from ..eagle import EagleHead
from ..ops import Expansion, smart_expand
from ..planner import MARGIN, StepPlanner, TreeFacts
from ..profiling import Profile, profile
from ..stages import PlanStats, StepRecord
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import Acceptance, vocab_size
from .base import Supplier, check_within, position_limit, root_only
from .draft import DraftRunner
from .eagle import WINDOW, EagleRunner
from .smart_host import HostTree, PoolTree, candidates
from .smart_rule import Rule, RowWeights

__all__ = ["SmartSupplier"]

HEAD_DEPTH = 6  # max_depth's default over an EAGLE head: its trees are drafted to the planner's cap whole,
# and 6 measured ahead of 12 (and level with 5) in same-process A/Bs (bench/results/2026-12-07-cpu-pooled/)
DRAFT_DEPTH = 12  # ... over a draft model, whose layers stop early (a deep tree of a strong draft pays)
BENEFITS = ("paper", "expected")
SELECTIONS = ("global", "layered")


class SmartSupplier(Supplier):
    """SMART trees from a draft model or an EAGLE head, planned step by step from a step cost model.

    draft:         a draft model, or an `EagleHead` loaded for the target (EAGLE-3 + SMART); the cost model
                   must then have been profiled with that head (`specdec.profile(target, head)`).
    cost_model:    a `CostModel` (used as is) or a `Profile` (the model for each batch size is fitted from
                   it when a batch starts, by `CostModel.fit`'s batch-size rule).
    alpha:         > 0, aggressiveness on top of the learned calibration alpha_hat (paper: 0.8).
    topk:          children considered per frontier node; frontier: most nodes forwarded per layer and row
                   (2 and 2: narrow, deep trees; docs/smart.md, "Defaults", says what was measured against 8 and 8).
    budget:        most nodes per tree, root included; None: the marginal rule alone decides, capped by
                   the most a tree can hold (1 + topk + (max_depth - 1) * frontier * topk).
    benefit:       "paper" (P(u) / |paths|, the current leaves) or "expected" (P(u)).
    padding_aware: price nodes against the batch's padded width (module docstring); batches only.
    max_depth:     the deepest cap the planner may choose; None: HEAD_DEPTH over an EAGLE head, DRAFT_DEPTH
                   over a draft model.
    early_stop:    one host sync per layer: stop growing when no row grows or the next layer cannot pay;
                   False: the planner's cap of layers on the device, one sync (module docstring); None: False
                   over an EAGLE head, True over a draft model.
    selection:     "global" (the rule over every layer's candidates in one ranking: `smart_host.PoolTree`; the
                   default) or "layered" (each layer's candidates kept or dropped before the next layer is
                   drafted; without early_stop, `ops.smart_expand` on the device).
    planner:       False: draft every step with the deepest cap (no plain steps, no probes).
    online:        refresh the costs from the loop's timers (False: the profile's costs throughout).
    realise:       scale the predicted gain of drafting by the drafting steps' realised rate over their
                   predicted one when choosing between drafting and plain steps (`StepPlanner._realise`).
    margin, probe_every: the planner's (`specdec.planner`).
    window:        over an EAGLE head, the most pairs its first catch-up of a call reads per row (the prompt's
                   end and the plain steps before it: `suppliers.eagle`); a draft model reads its whole prompt.
    reprofile:     with a Profile, a batch size outside its profiled range is profiled on the pair when the
                   batch starts (once per batch size, inside that `generate` call) instead of using the
                   nearest profiled batch size.
    """

    def __init__(self, draft: PreTrainedModel | EagleHead, cost_model: CostModel | Profile, *, alpha: float = 0.8,
                 topk: int = 2, frontier: int = 2, budget: int | None = None, max_depth: int | None = None,
                 benefit: str = "expected", padding_aware: bool = True, early_stop: bool | None = None,
                 selection: str | None = None, planner: bool = True,
                 online: bool = True, margin: float = MARGIN, probe_every: int = 32, reprofile: bool = False,
                 realise: bool = True, window: int | None = WINDOW,
                 backend: str = "auto"):
        if not isinstance(cost_model, (CostModel, Profile)):
            raise TypeError(f"cost_model: expected a CostModel or a Profile, got {type(cost_model).__name__}")
        if isinstance(cost_model, CostModel) and cost_model.draft_layer is None or \
                isinstance(cost_model, Profile) and cost_model.draft_seconds is None:
            raise ValueError("cost_model: profiled without a draft; SMART needs the draft's costs (profile the pair)")
        for name, value in (("alpha", alpha), ("margin", margin)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: expected a number > 0, got {value!r}")
        head = draft if isinstance(draft, EagleHead) else None
        if max_depth is None:
            max_depth = HEAD_DEPTH if head is not None else DRAFT_DEPTH
        if early_stop is None:
            early_stop = head is None
        topk, frontier, max_depth, probe_every = (as_int(v, name, 1) for v, name in (
            (topk, "topk"), (frontier, "frontier"), (max_depth, "max_depth"), (probe_every, "probe_every")))
        if budget is not None:
            budget = _optional_int(budget, "budget")
        if benefit not in BENEFITS:
            raise ValueError(f"benefit: {benefit!r} is not one of {BENEFITS}")
        if selection is None:
            selection = "global"
        if selection not in SELECTIONS:
            raise ValueError(f"selection: {selection!r} is not one of {SELECTIONS}")
        vocab = head.config.draft_vocab_size if head is not None else vocab_size(draft)
        if topk > vocab:
            raise ValueError(f"topk: {topk} exceeds the draft's vocabulary of {vocab}")
        self.runner = EagleRunner(head, backend, window) if head is not None else DraftRunner(draft, backend)
        self.draft, self._draft_model = draft, None if head is not None else draft
        self.alpha, self.topk, self.frontier, self.max_depth = float(alpha), topk, frontier, max_depth
        self.benefit, self.padding_aware, self.early_stop = benefit, padding_aware, early_stop
        self.selection = selection
        self.reprofile, self.backend = reprofile, backend
        # budget None: what the layers can hold, within the widest tree the cost model measured (beyond it
        # the verify curve is extrapolated, and the caches are sized for the budget: on the demo pair at
        # batch 16 a cache sized for 713 nodes made plain steps 11% slower than one sized for 1).
        most = 1 + topk + (max_depth - 1) * frontier * topk
        measured = cost_model.sizes[-1] if isinstance(cost_model, Profile) else int(cost_model.verify_points.x[-1])
        self.budget = min(most, measured) if budget is None else min(budget, most)
        self.requested_budget = budget
        self.planner = StepPlanner(max_depth, choices=None if planner else (max_depth,), margin=margin,
                                   probe_every=probe_every, online=online, realise=realise)
        self._costs = CostsByBatch(cost_model)  # its source is `source`: the cost model or the profile
        self._facts: TreeFacts | None = None
        self._vocab: tuple[np.ndarray, Callable[[Tensor], Tensor]] | None = None  # `attach`: an EAGLE-3 head's ids

    @property
    def source(self) -> CostModel | Profile:
        """The cost model, or the profile (with any batch size `reprofile` measured added)."""
        return self._costs.source

    def attach(self, target: PreTrainedModel) -> None:
        """Checks that need the target (bounds: see `DraftSupplier.attach`); without an explicit budget the
        tree's cap is also held to the models' positions."""
        self.runner.attach(target)
        self._target = target
        check_compatible(self.source, target, self.draft)
        limit = position_limit(target, self._draft_model)
        check_within("max_depth", self.max_depth, None if limit is None else limit - 1,
                     f"the depth the models' {limit} positions allow")
        if self.requested_budget is not None:
            check_within("budget", self.requested_budget, limit, "the models' positions")
        elif limit is not None:
            self.budget = min(self.budget, limit)
        shared = self.draft.config.draft_vocab_size if self._draft_model is None else self.runner.vocab.size
        check_within("topk", self.topk, shared, "the token ids the draft shares with the target")
        ids = self.draft.draft_ids if self._draft_model is None else None  # an EAGLE head's draft vocabulary
        self._vocab = None if ids is None else (ids.cpu().numpy(), self.draft.widen)

    def max_tree_size(self) -> int:
        return self.budget

    def feature_layers(self) -> tuple[int, ...] | None:
        return self.runner.feature_layers if isinstance(self.runner, EagleRunner) else None

    def _region(self) -> int:
        return self.frontier * max(self.max_depth - 1, 1)  # the tree's layers (the catch-up commits its backlog)

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        cache, logits = self.runner.memory_bytes(batch_size, capacity, self._region(), self.frontier,
                                                 self.max_depth - 1)
        verify = batch_size * self.budget * self.runner.target_vocab * 8  # the target's logits over the tree
        return {"max_depth": cache, "frontier": logits, "budget": verify}

    def start(self, state: DecodeState) -> None:
        self.planner.start(self._cost_model(state.batch_size))
        self._tree = None
        self.runner.start(state, region=self._region())

    def commit(self, acc: Acceptance) -> None:
        self.runner.commit(acc)
        tree, self._tree = self._tree, None
        if tree is not None:  # the target's verdict on the host-built tree calibrates the draft
            self.planner.observe_tree(tree.tokens, tree.parents, tree.size, tree.edge, acc.host_tokens,
                                      acc.host_num_accepted)

    def record_step(self, step: StepRecord) -> None:
        self.planner.record(step, self._facts)

    def report(self) -> PlanStats:
        return self.planner.report()

    def _cost_model(self, batch_size: int) -> CostModel:
        src = self.source
        if self.reprofile and isinstance(src, Profile) and not src.batch_sizes[0] <= batch_size <= src.batch_sizes[-1]:
            self._costs.source = self._profile_batch(batch_size)
        return self._costs(batch_size)

    def _profile_batch(self, batch_size: int) -> Profile:
        """The profile with `batch_size` measured here and added (same context length, sizes, repeats)."""
        src = self.source
        new = profile(self._target, self.draft, batch_sizes=(batch_size,), context_len=src.context_len,
                      sizes=src.sizes, repeats=src.repeats, backend=self.backend, progress=False)
        order = sorted(range(len(src.batch_sizes) + 1), key=lambda i: (list(src.batch_sizes) + [batch_size])[i])
        pick = lambda rows, more: tuple((list(rows) + list(more))[i] for i in order)  # noqa: E731
        return replace(src, batch_sizes=pick(src.batch_sizes, [batch_size]),
                       verify_seconds=pick(src.verify_seconds, new.verify_seconds),
                       context_seconds=pick(src.context_seconds, new.context_seconds),
                       ar_step_seconds=pick(src.ar_step_seconds, new.ar_step_seconds),
                       draft_seconds=pick(src.draft_seconds, new.draft_seconds),
                       catch_up_seconds=pick(src.catch_up_seconds, new.catch_up_seconds))

    def propose(self, state: DecodeState) -> TreeBatch:
        if self.planner.quick_plain():  # a quiet plain step: nothing to weigh, the draft does not run
            self._facts, self._tree = None, None
            return root_only(state.root)
        if not self.runner.backlog.all():  # an EAGLE head before the first verification: no features yet
            self._facts, self._tree = None, None
            return root_only(state.root)
        # The first drafting step of a call also reads the prompts (the draft's prefill, priced as part of
        # its catch-up; an EAGLE head's prompt pairs are in its backlog already): a probe then costs most.
        cold = self.runner.cold
        backlog = int(self.runner.backlog.max()) + self.runner.pending_prefill
        context = float((state.history_len - state.host_start).max())
        plan = self.planner.plan(backlog, context, cold)
        self._facts, self._tree = None, None
        if plan.depth == 0:  # plain decoding: the draft does not run, its backlog grows
            return root_only(state.root)
        if self.early_stop:
            build = self._draft_global if self.selection == "global" else self._draft
        else:
            build = self._draft_pooled if self.selection == "global" else self._draft_device
        return build(state, plan.depth, backlog)

    def _draft(self, state: DecodeState, cap: int, backlog: int) -> TreeBatch:
        """Grow each row's tree up to depth `cap`, the rule on the host, one sync per layer (module docstring)."""
        B, F, k, device = state.batch_size, self.frontier, self.topk, state.root.device
        plan = self.planner
        tree = HostTree(state.history[np.arange(B), state.history_len - 1], self.budget)  # the roots, host-side
        verify = self._verify_curve()
        # an EAGLE-3 head's logits stay over its draft vocabulary (`candidates` maps the children's ids)
        narrow, vocab = ({"narrow": True}, self._vocab) if self._vocab is not None else ({}, None)
        tokens, logp = candidates(self.runner.catch_up(**narrow)[:, None], k, vocab)  # [B, 1, k]: the root's children
        self.runner.begin_tree(F, max(cap - 1, 1))
        widths, after = [], []  # per forward: its width; per depth: the tree's padded width
        depth, used, last_start = 0, 0, 0
        while True:
            spent = plan.spent(backlog, widths)
            kept = tree.grow(tokens, logp, Rule(self.alpha, plan.calibration, verify, spent, self.budget,
                                                self.benefit == "paper", self._batch_rule(B)))
            if not kept.any():
                break
            depth += 1
            width = int(tree.size.max())
            after.append(width)
            if depth == cap:
                break
            # Forward each row's w best kept nodes (column i: every row's i-th best, calibrated). The layer's
            # worth is an expectation (alpha, the knob of the node rule, does not discount it).
            bounds = kept[:, :min(F, int((kept > 0).sum(1).max()))].sum(0)
            w = plan.frontier_width(bounds.tolist(), plan.depths.onward(depth + 1), float(tree.length.sum()),
                                    spent, width)
            if w == 0:
                break
            front, parent = tree.frontier(w, last_start)
            last_start = used
            logits = self.runner.forward_layer(torch.from_numpy(front).to(device),
                                               None if depth == 1 else torch.from_numpy(parent).to(device), **narrow)
            used += w
            widths.append(w)
            tokens, logp = candidates(logits, k, vocab)
        self._facts = TreeFacts(cap, len(widths), tuple(widths), tuple(after), backlog, tree.depth)
        self._tree = tree
        n = int(tree.size.max())
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a[:, :n])).to(device)  # noqa: E731
        return TreeBatch(to(tree.tokens), to(tree.parents), torch.from_numpy(tree.size).to(device), to(tree.logp),
                         max_depth=depth)

    def _draft_global(self, state: DecodeState, cap: int, backlog: int) -> TreeBatch:
        """Grow each row's pool up to depth `cap` and keep its best prefix in one ranking (`PoolTree`), one
        sync per layer; the layers' forwards are decided as `_draft`'s, against the prefix so far."""
        B, F, k, device = state.batch_size, self.frontier, self.topk, state.root.device
        plan = self.planner
        pool = PoolTree(state.history[np.arange(B), state.history_len - 1])
        verify = self._verify_curve()
        narrow, vocab = ({"narrow": True}, self._vocab) if self._vocab is not None else ({}, None)
        tokens, logp = candidates(self.runner.catch_up(**narrow)[:, None], k, vocab)  # [B, 1, k]: the root's children
        self.runner.begin_tree(F, max(cap - 1, 1))
        rows = self._row_weights(state)
        rule = lambda spent: Rule(self.alpha, plan.calibration, verify, spent, self.budget,  # noqa: E731
                                  self.benefit == "paper", self._batch_rule(B), rows)
        widths, depth, used, last_start = [], 0, 0, 0
        while True:
            spent = plan.spent(backlog, widths)
            pool.add(tokens, logp, plan.calibration)
            depth += 1
            width = pool.select(rule(spent))
            if depth == cap or not pool.newest_active():
                break
            # the newest layer's best candidates (column i: every row's i-th) and the most forwarding them adds
            front, parent, bounds = pool.frontier(F, last_start, k)
            w = plan.frontier_width(bounds, plan.depths.onward(depth + 1), sum(pool.length), spent, width)
            if w == 0:
                break
            pool.narrow(w)
            last_start = used
            logits = self.runner.forward_layer(torch.from_numpy(front[:, :w]).to(device),
                                               None if depth == 1 else torch.from_numpy(parent[:, :w]).to(device),
                                               **narrow)
            used += w
            widths.append(w)
            tokens, logp = candidates(logits, k, vocab)
        pool.select(rule(plan.spent(backlog, widths)))  # the layers forwarded are all paid now
        tok, par, lp, edge, size, row_depth = pool.tree()
        reached = int(row_depth.max())
        self._facts = TreeFacts(cap, len(widths), tuple(widths), pool.widths_by_depth(), backlog, row_depth)
        self._tree = _HostView(tok, par, size, edge)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        return TreeBatch(to(tok), to(par), to(size), to(lp), max_depth=reached)

    def _draft_pooled(self, state: DecodeState, cap: int, backlog: int) -> TreeBatch:
        """`early_stop=False`, global selection: `cap` layers grown on the device as EAGLE-2 grows them (each
        layer forwards the `frontier` candidates of best raw path log-probability, every one of them), one
        sync, then the rule over the whole pool in one ranking on the host (`PoolTree.from_layers`). No
        host work between the forwards: the planner's cap alone sets the depth."""
        B, F, k, device = state.batch_size, self.frontier, self.topk, state.root.device
        plan = self.planner
        narrow = {"narrow": True} if self._vocab is not None else {}
        ids = self.draft.draft_ids if self._vocab is not None else None  # draft id -> target id (EAGLE-3)
        logits = self.runner.catch_up(**narrow)[:, None]  # [B, 1, V]
        self.runner.begin_tree(F, max(cap - 1, 1))
        path = torch.zeros(B, 1, device=device)  # the frontier's raw path log-probabilities
        parent = torch.full((B, k), -1, dtype=torch.int64, device=device)  # layer 1: children of the root
        layers, widths, start = [], [], 0
        for d in range(1, cap + 1):
            edge, tok = torch.log_softmax(logits.detach().float(), dim=-1).topk(k, dim=-1)  # [B, w, k]
            tok = tok.flatten(1) if ids is None else ids[tok.flatten(1)]
            layers.append(torch.stack([tok.double(), edge.flatten(1).double(), parent.double()]))
            if d == cap:
                break
            path, best = (path[:, :, None] + edge).flatten(1).topk(min(F, edge[0].numel()), dim=-1)
            w = best.shape[1]
            logits = self.runner.forward_layer(tok.gather(1, best), None if d == 1 else start + best // k, **narrow)
            start = sum(widths)
            widths.append(w)
            parent = best[:, :, None].expand(B, w, k).flatten(1)  # index in the layer just drafted
        table = torch.cat(layers, 2).cpu().numpy()  # the step's one sync: [3, B, N]
        pool = PoolTree.from_layers(state.history[np.arange(B), state.history_len - 1], table,
                                    [x.shape[2] for x in layers], plan.calibration)
        verify = self._verify_curve()
        pool.select(Rule(self.alpha, plan.calibration, verify, plan.spent(backlog, widths), self.budget,
                         self.benefit == "paper", self._batch_rule(B), self._row_weights(state)))
        tok, par, lp, edge, size, row_depth = pool.tree()
        self._facts = TreeFacts(cap, len(widths), tuple(widths), pool.widths_by_depth(), backlog, row_depth)
        self._tree = _HostView(tok, par, size, edge)
        to = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        return TreeBatch(to(tok), to(par), to(size), to(lp), max_depth=int(row_depth.max()))

    def _draft_device(self, state: DecodeState, cap: int, backlog: int) -> TreeBatch:
        """`early_stop=False`: `cap` layers at the full frontier, K2's per-row rule on the device (the
        paper's benefit with |paths| held per layer, or the expected one), one sync at the end."""
        B, F, k, device = state.batch_size, self.frontier, self.topk, state.root.device
        M, plan = self.budget, self.planner
        tokens = torch.zeros(B, M + 1, dtype=torch.int64, device=device)  # column M: scratch for dropped nodes
        parents = torch.full((B, M + 1), -1, dtype=torch.int64, device=device)
        logp = torch.zeros(B, M + 1, dtype=torch.float32, device=device)
        tokens[:, 0] = state.root
        size = torch.ones(B, dtype=torch.int64, device=device)
        length = torch.ones(B, dtype=torch.float32, device=device)
        paths = torch.ones(B, dtype=torch.int64, device=device)
        logits = self.runner.catch_up()[:, None]
        front_logp = torch.zeros(B, 1, dtype=torch.float32, device=device)
        front_node = torch.zeros(B, 1, dtype=torch.int64, device=device)
        self.runner.begin_tree(F, max(cap - 1, 1))
        pending, widths, last_start = [], [], 0
        for d in range(1, cap + 1):
            spent = plan.spent(backlog, widths)
            cost = torch.tensor(plan.cost_vector(spent, 1), dtype=torch.float32, device=device)
            exp = smart_expand(logits, front_logp, size, length, paths, cost, k=k, alpha=self.alpha, budget=M,
                               benefit=self.benefit, backend=self.backend)
            keep, count = exp.keep, exp.keep.sum(-1)
            dst = torch.where(keep, size[:, None] + torch.arange(keep.shape[1], device=device), M)
            tokens.scatter_(1, dst, exp.tokens)
            parents.scatter_(1, dst, front_node.gather(1, exp.parent_slot))
            logp.scatter_(1, dst, exp.logp)
            fed = torch.zeros(B, front_node.shape[1] + 1, dtype=torch.int64, device=device)
            fed.scatter_(1, torch.where(keep, exp.parent_slot, front_node.shape[1]), 1)
            paths = paths + count - fed[:, :-1].sum(-1)
            length = exp.expected_len
            front_node = (size[:, None] + torch.arange(F, device=device))
            size = size + count
            pending.append(torch.stack([count.max(), size.max()]))
            if d == cap:
                break
            front_tok, front_logp, front_parent = self._next_frontier(exp, keep, F)
            logits = self.runner.forward_layer(front_tok, None if d == 1 else last_start + front_parent)
            last_start = (d - 1) * F
            widths.append(F)
        table = torch.stack(pending).tolist()  # the step's one sync in this mode: widths and the planner's numbers
        depth = next((i for i, r in enumerate(table) if r[0] == 0), len(table))
        width = int(table[-1][1])
        self._facts = TreeFacts(cap, len(widths), tuple(widths), tuple(int(r[1]) for r in table[:depth]), backlog)
        self._tree = None
        return TreeBatch(tokens[:, :width], parents[:, :width], size, logp[:, :width], max_depth=depth)

    def _verify_curve(self) -> np.ndarray:
        """The step's corrected verify seconds by padded width, index 1 continuing the tree curve (see Rule)."""
        verify = self.planner.costs.verify_array(self.planner.context)
        verify[1] = max(2 * verify[2] - verify[3], 0.0)
        return verify

    @staticmethod
    def _row_weights(state: DecodeState) -> RowWeights:
        """What each row's tokens are worth to the batch: nothing for a finished row (the loop cuts its tree
        to the root, so its candidates must not buy the batch's columns), and nothing past the tokens a row
        may still emit (`max_new_tokens`)."""
        left = state.max_new_tokens - state.num_new
        return RowWeights(tuple((~state.finished).astype(float).tolist()), tuple(np.maximum(left - 1, 0).tolist()))

    def _batch_rule(self, batch_size: int) -> bool:
        return self.padding_aware and batch_size > 1

    @staticmethod
    def _next_frontier(exp: Expansion, keep: Tensor, w: int) -> tuple[Tensor, Tensor, Tensor]:
        """The best w kept candidates (a prefix: candidates are sorted), inactive where a row kept fewer.

        Returns tokens [B, w] (inactive: 0), path log-probs [B, w] (inactive: -inf) and the frontier slot
        of each one's parent in the layer just forwarded [B, w] (inactive: 0).
        """
        B, FK = keep.shape
        take = min(w, FK)
        active = keep[:, :take]
        tok = torch.where(active, exp.tokens[:, :take], 0)
        lp = torch.where(active, exp.logp[:, :take], float("-inf"))
        par = torch.where(active, exp.parent_slot[:, :take], 0)
        if take < w:
            tok = torch.cat([tok, tok.new_zeros(B, w - take)], 1)
            lp = torch.cat([lp, lp.new_full((B, w - take), float("-inf"))], 1)
            par = torch.cat([par, par.new_zeros(B, w - take)], 1)
        return tok, lp, par


class _HostView:
    """A step's selected trees as `commit` hands them to the planner's calibration (`HostTree`'s fields)."""

    def __init__(self, tokens: np.ndarray, parents: np.ndarray, size: np.ndarray, edge: np.ndarray):
        self.tokens, self.parents, self.size, self.edge = tokens, parents, size, edge


def _optional_int(value: object, name: str) -> int:
    """A set optional count: an int >= 1 (NumPy integers too); ValueError naming `name` otherwise."""
    try:
        return as_int(value, name, 1)
    except ValueError:
        raise ValueError(f"{name}: expected None or an int >= 1, got {value!r}") from None
