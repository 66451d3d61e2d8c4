"""SMART: hardware-aware draft trees, grown layer by layer while the next node raises the predicted speedup.

Each step the draft catches up (as for `DraftSupplier`), then for depth d = 1, 2, ... `max_depth`:
`ops.smart_expand` takes the top-`topk` children of every frontier node, sorts them by path probability
and keeps, per row, the longest prefix passing SMART's test (DESIGN 4 K2)::

    alpha * dL(u) / dC(|T|) > L(T) / C(|T|)        dL(u) = P(u) / |paths| ("paper") or P(u) ("expected")

with C the fitted `CostModel`. The kept candidates join the tree; the best `frontier` of them (by path
probability) are forwarded through the draft in one tree-attention call, giving the next layer's logits.
Rows grow independently. When nothing passes at depth 1 the tree is the root alone: an AR step.

Worked example (one row, topk 2, frontier 2): the root's children a (P .6) and b (P .3) pass, the tree
is {root, a, b}; a and b are forwarded; their children aa (.36), ab (.18), ba (.15), bb (.09) are sorted
and the test keeps aa only; aa is forwarded alone (slot 2 inactive); at depth 3 nothing passes; the tree
is root -> {a -> aa, b}, 4 nodes, L = 1 + .6 + .3 + .36.

Host syncs: by default one per layer, deliberate: "does any row still grow?" (and the widest row, which
sizes the final tree). Without it every step would run `max_depth` draft forwards even when the tree
stopped at depth 1, which is what SMART does at large batch sizes. `early_stop=False` removes the
per-layer syncs (max_depth layers always, one sync at the end for the tree width).
"""

from __future__ import annotations

import warnings
from collections import deque
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from ..checks import as_int
from ..cost import CostModel, check_compatible
from ..ops import Expansion, smart_cost, smart_expand
from ..profiling import Profile, profile
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import Acceptance, vocab_size
from .base import Supplier, check_within, position_limit
from .draft import DraftRunner

__all__ = ["SmartSupplier"]

BENEFITS = ("paper", "expected")
TRACE_STEPS = 1 << 16


class SmartSupplier(Supplier):
    """SMART trees from a draft model and a fitted cost model.

    cost_model:    a `CostModel` (used as is) or a `Profile` (the model for each batch size is fitted from
                   it when a batch starts, by `CostModel.fit`'s batch-size rule).
    alpha:         > 0, aggressiveness; larger grows bigger trees (paper: 0.8).
    topk:          children considered per frontier node; frontier: nodes forwarded per layer and row.
    budget:        most nodes per tree, root included; None: the marginal rule alone decides, capped by
                   the most a tree can hold (1 + topk + (max_depth - 1) * frontier * topk).
    benefit:       "paper" (P(u) / |paths|) or "expected" (P(u)).
    padding_aware: a batch verifies every row padded to the widest row, so a node that keeps its row
                   within that width adds no verification column: it costs only drafting (lambda). The
                   test then uses C(max(|T|, W)) and, below W, dC = lambda (W: widest row at the layer's start).
    early_stop:    one host sync per layer to stop once no row grows (see the module docstring).
    refit_every:   None, or N: every N steps rescale the verification cost by the median ratio of measured
                   to predicted verification times of the last N steps (online refit).
    reprofile:     with a Profile, a batch size outside its profiled range is profiled on the target when
                   the batch starts (once per batch size, inside that `generate` call) instead of using the
                   nearest profiled batch size.
    """

    def __init__(self, draft: PreTrainedModel, cost_model: CostModel | Profile, *, alpha: float = 0.8,
                 topk: int = 8, frontier: int = 8, budget: int | None = None, max_depth: int = 12,
                 benefit: str = "paper", padding_aware: bool = False, early_stop: bool = True,
                 refit_every: int | None = None, reprofile: bool = False, backend: str = "auto"):
        if not isinstance(cost_model, (CostModel, Profile)):
            raise TypeError(f"cost_model: expected a CostModel or a Profile, got {type(cost_model).__name__}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
            raise ValueError(f"alpha: expected a number > 0, got {alpha!r}")
        topk, frontier, max_depth = (as_int(v, name, 1) for v, name in ((topk, "topk"), (frontier, "frontier"),
                                                                         (max_depth, "max_depth")))
        if budget is not None:
            budget = _optional_int(budget, "budget")
        if benefit not in BENEFITS:
            raise ValueError(f"benefit: {benefit!r} is not one of {BENEFITS}")
        if refit_every is not None:
            refit_every = _optional_int(refit_every, "refit_every")
        if topk > vocab_size(draft):
            raise ValueError(f"topk: {topk} exceeds the draft's vocabulary of {vocab_size(draft)}")
        self.runner = DraftRunner(draft, backend)
        self.source = cost_model
        self.cost_model = cost_model if isinstance(cost_model, CostModel) else None
        self.alpha, self.topk, self.frontier, self.max_depth = float(alpha), topk, frontier, max_depth
        self.benefit, self.padding_aware, self.early_stop = benefit, padding_aware, early_stop
        self.refit_every, self.reprofile, self.backend = refit_every, reprofile, backend
        most = 1 + topk + (max_depth - 1) * frontier * topk
        self.budget = most if budget is None else min(budget, most)
        self.requested_budget = budget
        self._models: dict[int, CostModel] = {}
        # Per step: mean predicted L over rows (a device scalar) and the tree width; bounded, for long runs.
        self.trace: deque[tuple[Tensor, int]] = deque(maxlen=TRACE_STEPS)

    def attach(self, target: PreTrainedModel) -> None:
        """Checks that need the target (bounds: see `DraftSupplier.attach`); without an explicit budget the
        tree's cap is also held to the models' positions."""
        self.runner.attach(target)
        self._target = target
        check_compatible(self.source, target, self.runner.draft)
        limit = position_limit(target, self.runner.draft)
        check_within("max_depth", self.max_depth, None if limit is None else limit - 1,
                     f"the depth the models' {limit} positions allow")
        if self.requested_budget is not None:
            check_within("budget", self.requested_budget, limit, "the models' positions")
        elif limit is not None:
            self.budget = min(self.budget, limit)
        check_within("topk", self.topk, self.runner.vocab.size, "the token ids the draft shares with the target")

    def max_tree_size(self) -> int:
        return self.budget

    def _region(self) -> int:
        return max(self.max_depth + 1, self.frontier * (self.max_depth - 1))

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        cache, logits = self.runner.memory_bytes(batch_size, capacity, self._region(), self.frontier,
                                                 self.max_depth - 1)
        verify = batch_size * self.budget * self.runner.vocab.target * 8  # the target's logits over the tree
        return {"max_depth": cache, "frontier": logits, "budget": verify}

    def start(self, state: DecodeState) -> None:
        B = state.batch_size
        if isinstance(self.source, Profile):
            if B not in self._models:
                if self.reprofile and not self.source.batch_sizes[0] <= B <= self.source.batch_sizes[-1]:
                    self.source = self._profile_batch(B)
                self._models[B] = CostModel.fit(self.source, B)
            self.cost_model = self._models[B]
        elif self.cost_model.batch_size != B and self.refit_every is None:
            warnings.warn(f"cost_model: fitted at batch size {self.cost_model.batch_size}, running at {B}; pass a "
                          "Profile (or refit_every) so the cost follows the batch size", stacklevel=2)
        self._base = self.cost_model
        self._cost = self.cost_model.as_tensor(state.root.device)
        self._observed: list[tuple[int, float]] = []
        self.runner.start(state, region=self._region())

    def commit(self, acc: Acceptance) -> None:
        self.runner.commit(acc)

    def _profile_batch(self, batch_size: int) -> Profile:
        """The profile with `batch_size` measured here and added (same context length, sizes, repeats)."""
        src = self.source
        new = profile(self._target, self.runner.draft if src.draft_seconds is not None else None,
                      batch_sizes=(batch_size,), context_len=src.context_len, sizes=src.sizes, repeats=src.repeats,
                      backend=self.backend, progress=False)
        order = sorted(range(len(src.batch_sizes) + 1), key=lambda i: (list(src.batch_sizes) + [batch_size])[i])
        pick = lambda rows, more: tuple((list(rows) + list(more))[i] for i in order)  # noqa: E731
        return replace(src, batch_sizes=pick(src.batch_sizes, [batch_size]),
                       verify_seconds=pick(src.verify_seconds, new.verify_seconds),
                       draft_seconds=None if src.draft_seconds is None else pick(src.draft_seconds, new.draft_seconds))

    def record_verify(self, width: int, seconds: float) -> None:
        """Online refit: keep the step's verification time; every `refit_every` steps rescale the model."""
        if self.refit_every is None:
            return
        self._observed.append((width, seconds))
        if len(self._observed) < self.refit_every:
            return
        widths = np.array([w for w, _ in self._observed], dtype=np.float64)
        measured = np.array([s for _, s in self._observed])
        base = self._base
        predicted = base.predict(widths) - base.lam * widths  # the verification part of C
        self.cost_model = base.scaled_verify(float(np.median(measured / predicted)))
        self._cost = self.cost_model.as_tensor(self._cost.device)
        self._observed = []

    def propose(self, state: DecodeState) -> TreeBatch:
        B, F, k, device = state.batch_size, self.frontier, self.topk, state.root.device
        M = self.budget
        # Node buffers with one scratch column (index M) where candidates that are not kept land.
        tokens = torch.zeros(B, M + 1, dtype=torch.int64, device=device)
        parents = torch.full((B, M + 1), -1, dtype=torch.int64, device=device)
        logp = torch.zeros(B, M + 1, dtype=torch.float32, device=device)
        tokens[:, 0] = state.root
        size = torch.ones(B, dtype=torch.int64, device=device)  # |T|
        length = torch.ones(B, dtype=torch.float32, device=device)  # L(T): the bonus token + sum of P
        paths = torch.ones(B, dtype=torch.int64, device=device)  # leaves of the tree
        logits = self.runner.catch_up()[:, None]  # [B, 1, V]: the root is the first frontier
        front_logp = torch.zeros(B, 1, dtype=torch.float32, device=device)  # [B, F]
        front_node = torch.zeros(B, 1, dtype=torch.int64, device=device)  # [B, F]: tree node of each slot
        self.runner.begin_tree(F, self.max_depth - 1)
        width, depth = 1, 0
        for d in range(1, self.max_depth + 1):
            exp = smart_expand(logits, front_logp, size, length, paths, self._cost, k=k, alpha=self.alpha,
                               budget=self.budget, benefit=self.benefit, backend=self.backend)
            keep = self._padding_keep(exp, size, length, paths) if self.padding_aware and B > 1 else exp.keep
            count = keep.sum(-1)  # [B]
            FK = keep.shape[1]
            dst = torch.where(keep, size[:, None] + torch.arange(FK, device=device), M)  # [B, F*k]
            tokens.scatter_(1, dst, exp.tokens)
            parents.scatter_(1, dst, front_node.gather(1, exp.parent_slot))
            logp.scatter_(1, dst, exp.logp)
            fed = torch.zeros(B, front_node.shape[1] + 1, dtype=torch.int64, device=device)
            fed.scatter_(1, torch.where(keep, exp.parent_slot, front_node.shape[1]), 1)  # parents with a kept child
            paths = paths + count - fed[:, :-1].sum(-1)
            length = length + torch.where(keep, exp.logp.exp(), 0.0).sum(-1)
            new_node = size[:, None] + torch.arange(F, device=device)  # [B, F]: the best F kept candidates
            size = size + count
            if self.early_stop:
                grown, width = (int(x) for x in torch.stack([count.max(), size.max()]).tolist())  # deliberate sync
                if grown == 0:
                    break
            depth = d
            if d == self.max_depth:
                break
            front_tok, front_logp, front_parent = self._next_frontier(exp, keep, F)
            front_node = new_node
            parent_slot = None if d == 1 else (d - 2) * F + front_parent
            logits = self.runner.forward_layer(front_tok, parent_slot)
        if not self.early_stop:
            width = int(size.max())  # the step's one sync in this mode: the tree's width
        self.trace.append((length.mean(), width))
        return TreeBatch(tokens[:, :width], parents[:, :width], size, logp[:, :width], max_depth=depth)

    def predicted(self) -> dict[str, float]:
        """What the cost model predicted over the steps in `trace` (cleared by the caller between runs):
        mean expected accepted length L and mean speedup c_T * L / C(width) per step. One host sync."""
        if not self.trace:
            return {"predicted_accepted_length": 0.0, "predicted_speedup": 0.0}
        lengths = torch.stack([t for t, _ in self.trace]).double().cpu().numpy()
        widths = np.array([w for _, w in self.trace], dtype=np.float64)
        model = self.cost_model
        return {"predicted_accepted_length": float(lengths.mean()),
                "predicted_speedup": float(np.mean(model.speedup(lengths, widths)))}

    @staticmethod
    def _next_frontier(exp: Expansion, keep: Tensor, F: int) -> tuple[Tensor, Tensor, Tensor]:
        """The best F kept candidates (a prefix: candidates are sorted), padded to F inactive slots.

        Returns tokens [B, F] (inactive: 0), path log-probs [B, F] (inactive: -inf) and the frontier slot
        of each one's parent in the layer just forwarded [B, F] (inactive: 0).
        """
        B, FK = keep.shape
        take = min(F, FK)
        pad = F - take
        active = keep[:, :take]
        tok = torch.where(active, exp.tokens[:, :take], 0)
        lp = torch.where(active, exp.logp[:, :take], float("-inf"))
        par = exp.parent_slot[:, :take]
        if pad:
            tok = torch.cat([tok, tok.new_zeros(B, pad)], 1)
            lp = torch.cat([lp, lp.new_full((B, pad), float("-inf"))], 1)
            par = torch.cat([par, par.new_zeros(B, pad)], 1)
        return tok, lp, par

    def _padding_keep(self, exp: Expansion, size: Tensor, length: Tensor, paths: Tensor) -> Tensor:
        """The padding-aware test on K2's sorted candidates: below the widest row W a node costs lambda."""
        FK = exp.logp.shape[1]
        n = (size[:, None] + torch.arange(FK, device=size.device)).float()  # |T|_j
        wide = size.max().float()
        value, slope = smart_cost(self._cost, n)
        under = n + 1.0 <= wide
        value = torch.where(under, smart_cost(self._cost, wide[None])[0], value)
        slope = torch.where(under, self._cost[1], slope)
        prob = exp.logp.exp()
        tree_len = length[:, None] + prob.cumsum(-1) - prob  # L_j
        gain = prob / paths[:, None].float() if self.benefit == "paper" else prob
        ok = (exp.logp != float("-inf")) & (self.alpha * gain / slope > tree_len / value) & (n + 1.0 <= self.budget)
        return (~ok).cumsum(-1) == 0


def _optional_int(value: object, name: str) -> int:
    """A set optional count: an int >= 1 (NumPy integers too); ValueError naming `name` otherwise."""
    try:
        return as_int(value, name, 1)
    except ValueError:
        raise ValueError(f"{name}: expected None or an int >= 1, got {value!r}") from None
