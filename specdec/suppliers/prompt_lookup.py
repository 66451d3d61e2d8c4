"""Prompt lookup: candidates copied from earlier occurrences of the context's last n-gram.

For each row, the longest n in [min_ngram, max_ngram] whose last-n-token suffix occurs earlier in the
row's context (prompt and output so far) wins; the `max_matches` most recent occurrences each propose the
`num_pred` tokens that followed them, and the continuations are merged into a trie. Runs on the host
with numpy, vectorised over rows, on the committed tokens the state already holds there (no device
sync), like the n-gram proposers of serving engines.

With `cost_model` the step planner (`specdec.planner`) prices the steps: a lookup step only when one pays
(else a plain step, no lookup), and each row's trie cut by SMART's marginal rule (`trie.plan_trie`):
a node's probability is its share of the matches, calibrated per depth by the measured acceptance, its
cost the verification it adds, the lookup priced as the draft's cost.
"""

from __future__ import annotations

import numpy as np
import torch
from numpy.lib.stride_tricks import sliding_window_view
from transformers import PreTrainedModel

from ..checks import as_int
from ..cost import CostModel, check_compatible
from ..cost_by_batch import CostsByBatch
from ..planner import StepPlanner, TreeFacts
from ..profiling import Profile
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import vocab_size
from .base import check_within, position_limit, root_only
from .trie import PlannedTrieSupplier, Trie, plan_trie, prefix_trie

__all__ = ["PromptLookupSupplier"]


class PromptLookupSupplier(PlannedTrieSupplier):
    """Prompt lookup (module docstring). cost_model: a `CostModel` or `Profile` of the target to plan the
    steps and size the tries by (None: every match, every step); alpha, benefit: SMART's rule's."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1, num_pred: int = 10, max_matches: int = 4, *,
                 cost_model: CostModel | Profile | None = None, alpha: float = 0.8, benefit: str = "paper"):
        max_ngram, min_ngram, num_pred, max_matches = (as_int(value, name, 1) for name, value in (
            ("max_ngram", max_ngram), ("min_ngram", min_ngram), ("num_pred", num_pred), ("max_matches", max_matches)))
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram: {min_ngram} exceeds max_ngram {max_ngram}")
        if cost_model is not None and not isinstance(cost_model, (CostModel, Profile)):
            raise ValueError(f"cost_model: expected a CostModel, a Profile or None, got {type(cost_model).__name__}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
            raise ValueError(f"alpha: expected a number > 0, got {alpha!r}")
        if benefit not in ("paper", "expected"):
            raise ValueError(f"benefit: {benefit!r} is not one of ('paper', 'expected')")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.num_pred, self.max_matches = num_pred, max_matches
        self.cost_source, self.alpha, self.benefit = cost_model, float(alpha), benefit
        self.planner = None if cost_model is None else StepPlanner(num_pred, choices=(0, num_pred), host=True)
        self._costs = None if cost_model is None else CostsByBatch(cost_model)
        self._facts: TreeFacts | None = None
        self._trie: Trie | None = None

    def attach(self, target: PreTrainedModel) -> None:
        """Bounds: a tree no deeper and no larger than the target's positions allow; the cost model's target."""
        if self.cost_source is not None:
            check_compatible(self.cost_source, target)
        limit = position_limit(target)
        check_within("num_pred", self.num_pred, None if limit is None else limit - 1,
                     f"the depth the target's {limit} positions allow")
        if limit is not None and self.max_tree_size() > limit:
            raise ValueError(f"max_matches: {self.max_matches} continuations of num_pred {self.num_pred} tokens make "
                             f"trees of up to {self.max_tree_size()} nodes, more than the target's {limit} positions")
        self._vocab = vocab_size(target)

    def max_tree_size(self) -> int:
        return 1 + self.num_pred * self.max_matches

    def start(self, state: DecodeState) -> None:
        if self.planner is not None:
            self.planner.start(self._costs(state.batch_size))

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        return {"num_pred": batch_size * self.max_tree_size() * self._vocab * 8}  # the target's logits over the tree

    def propose(self, state: DecodeState) -> TreeBatch:
        self._facts, self._trie = None, None
        if self.planner is not None:
            if self.planner.quick_plain():  # a quiet plain step: nothing to weigh
                return root_only(state.root)
            plan = self.planner.plan(context=float((state.history_len - state.host_start).max()))
            if plan.depth == 0:  # a lookup does not pay now: a plain step
                return root_only(state.root)
        cont = self._continuations(state.history, state.host_start, state.history_len)  # [B, M, K]
        trie = prefix_trie(cont)
        if self.planner is not None:
            keep, _, depth = plan_trie(trie.parents, trie.counts, trie.num_nodes, self.planner, self.alpha,
                                       self.benefit)
            trie = trie.select(keep)
            self._facts = TreeFacts(self.num_pred, 0, (), (trie.tokens.shape[1],) * depth)
            self._trie = trie
        tok = torch.from_numpy(trie.tokens).to(state.root.device)
        tok[:, 0] = state.root
        return TreeBatch(tok, torch.from_numpy(trie.parents).to(tok.device),
                         torch.from_numpy(trie.num_nodes).to(tok.device),
                         max_depth=self.num_pred)

    def _continuations(self, history: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """[B, M, K] int64: up to M = max_matches continuations of K = num_pred tokens per row, -1 padded."""
        B, width = history.shape
        M, K = self.max_matches, self.num_pred
        out = np.full((B, M, K), -1, dtype=np.int64)
        found = np.zeros(B, dtype=bool)
        rows = np.arange(B)
        for n in range(self.max_ngram, self.min_ngram - 1, -1):
            if n >= width:
                continue
            suffix = history[rows[:, None], (length - n)[:, None] + np.arange(n)]  # [B, n]
            windows = sliding_window_view(history, n, axis=1)  # [B, width - n + 1, n]
            pos = np.arange(windows.shape[1])[None, :]
            # an occurrence must lie in the row's context and be followed by at least one token
            hit = (windows == suffix[:, None, :]).all(-1) & (pos >= start[:, None]) & (pos + n < length[:, None])
            hit &= (length - n >= start)[:, None] & ~found[:, None]
            # most recent occurrences first: rank hits from the right
            rank = np.cumsum(hit[:, ::-1], axis=1)[:, ::-1]
            pick = hit & (rank <= M)
            r, p = np.nonzero(pick)
            m = rank[r, p] - 1
            idx = p[:, None] + n + np.arange(K)[None, :]  # [hits, K]
            ok = idx < length[r, None]
            out[r[:, None], m[:, None], np.arange(K)[None, :]] = np.where(ok, history[r[:, None], np.minimum(idx, width - 1)], -1)
            found |= hit.any(1)
        return out

