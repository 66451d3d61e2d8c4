"""Retrieval (REST): candidate trees from the continuations of the context's longest suffix in a datastore.

Per row and step: the longest suffix of the committed context (`max_suffix` tokens down to `min_suffix`,
the root included) that occurs in the datastore, found by binary search over its suffix array; up to
`max_matches` of its occurrences; the `continuation` tokens that follow each (stopping at a document's
end); every prefix of those continuations counted, and the most frequent ones (at most `budget` nodes,
root included) merged into a prefix-closed trie. A node's log-prob is log(count / continuations): the
relative frequency of its prefix, i.e. the path probability of the empirical continuation distribution,
the quantity a draft model's path log-prob estimates (SMART's rule and ValuSpec read it). No match: the
root alone, an autoregressive step.

With `cost_model` (SMART's rule and step planner on retrieval trees, beyond both papers): before the query,
the step planner (`specdec.planner`) decides from measured costs and acceptance whether a retrieval step
pays at all (else a plain step: no query, no tree); after it, the prefixes join in order of frequency
while each passes SMART's marginal test (`trie.plan_trie`), frequency calibrated by the planner's
measured acceptance per depth standing in for the draft probability, and priced by the same step cost
(the query is the draft's cost). `budget` stays the cap. Frequency order is prefix-closed (a prefix is at
least as frequent as its extensions and, at equal counts, shallower), so every prefix of it is a tree.

Host-side numpy on the committed tokens `DecodeState` keeps on the host (no device sync), vectorised over
rows, suffix lengths, matches and depths; the only loops are the binary search's ceil(log2 N) rounds.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from ..checks import as_int
from ..cost import CostModel, check_compatible
from ..cost_by_batch import CostsByBatch
from ..datastore import Datastore
from ..planner import StepPlanner, TreeFacts
from ..profiling import Profile
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import vocab_size
from .base import check_within, position_limit, root_only
from .trie import PlannedTrieSupplier, Trie, plan_trie, prefix_trie

__all__ = ["RetrievalSupplier"]


class RetrievalSupplier(PlannedTrieSupplier):
    """REST-style retrieval over `datastore` (a `Datastore`, built with the target's tokenizer).

    budget: the largest tree per row, root included (REST's 64 "choices" exclude the root; here the
    budget counts what the target verifies, like `DraftSupplier(total_tokens=...)` and SMART's budget).
    cost_model: a `CostModel` (fitted at the running batch size) or a `Profile` (fitted per batch size on
    first use): the step planner decides whether to retrieve and SMART's marginal rule sizes each row's
    tree, up to `budget` (module docstring); alpha and benefit as SMART's.
    """

    def __init__(self, datastore: Datastore, *, max_suffix: int = 16, min_suffix: int = 2, max_matches: int = 5000,
                 continuation: int = 10, budget: int = 64, cost_model: CostModel | Profile | None = None,
                 alpha: float = 0.8, benefit: str = "paper"):
        if not isinstance(datastore, Datastore):
            raise ValueError(f"datastore: expected a specdec Datastore, got {type(datastore).__name__}")
        max_suffix, min_suffix, max_matches, continuation, budget = (as_int(value, name, 1) for name, value in (
            ("max_suffix", max_suffix), ("min_suffix", min_suffix), ("max_matches", max_matches),
            ("continuation", continuation), ("budget", budget)))
        if min_suffix > max_suffix:
            raise ValueError(f"min_suffix: {min_suffix} exceeds max_suffix {max_suffix}")
        if cost_model is not None and not isinstance(cost_model, (CostModel, Profile)):
            raise ValueError(f"cost_model: expected a CostModel, a Profile or None, got {type(cost_model).__name__}")
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not alpha > 0:
            raise ValueError(f"alpha: expected a number > 0, got {alpha!r}")
        if benefit not in ("paper", "expected"):
            raise ValueError(f"benefit: {benefit!r} is not one of ('paper', 'expected')")
        self.datastore = datastore
        self.max_suffix, self.min_suffix = max_suffix, min_suffix
        self.max_matches, self.continuation, self.budget = max_matches, continuation, budget
        self.cost_source, self.alpha, self.benefit = cost_model, float(alpha), benefit
        self.planner = None if cost_model is None else StepPlanner(continuation, choices=(0, continuation), host=True)
        self._costs = None if cost_model is None else CostsByBatch(cost_model)
        self._facts: TreeFacts | None = None
        self._trie: Trie | None = None

    def attach(self, target: PreTrainedModel) -> None:
        if self.datastore.vocab_size > vocab_size(target):
            raise ValueError(f"datastore: built over {self.datastore.vocab_size} token ids, the target's vocabulary "
                             f"has {vocab_size(target)}; build it with the target's tokenizer")
        if self.cost_source is not None:
            check_compatible(self.cost_source, target)
        limit = position_limit(target)
        check_within("budget", self.budget, limit, "the target's positions")
        check_within("continuation", self.continuation, None if limit is None else limit - 1,
                     f"the depth the target's {limit} positions allow")
        self._vocab = vocab_size(target)

    def max_tree_size(self) -> int:
        return min(self.budget, 1 + self.max_matches * self.continuation)

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        # the target's logits over the tree; the continuations [B, max_matches, continuation] live on the host
        return {"budget": batch_size * self.max_tree_size() * self._vocab * 8}

    def start(self, state: DecodeState) -> None:
        if self.planner is not None:
            self.planner.start(self._costs(state.batch_size))

    def propose(self, state: DecodeState) -> TreeBatch:
        self._facts, self._trie = None, None
        if self.planner is not None:
            if self.planner.quick_plain():  # a quiet plain step: nothing to weigh
                return root_only(state.root)
            plan = self.planner.plan(context=float((state.history_len - state.host_start).max()))
            if plan.depth == 0:  # retrieving does not pay now: a plain step, no query
                return root_only(state.root)
        context = self._context(state)  # [B, max_suffix]
        match = self.datastore.longest_match(context, max_suffix=self.max_suffix, min_suffix=self.min_suffix)
        cont = self.datastore.continuations(match, max_matches=self.max_matches, length=self.continuation)
        trie = prefix_trie(cont, budget=self.budget, presorted=True)  # suffix-array order is lexicographic
        if self.planner is not None:
            keep, _, depth = plan_trie(trie.parents, trie.counts, trie.num_nodes, self.planner, self.alpha,
                                       self.benefit)
            trie = trie.select(keep)
            self._facts = TreeFacts(self.continuation, 0, (), (trie.tokens.shape[1],) * depth)
            self._trie = trie
        device = state.root.device
        tokens = torch.from_numpy(trie.tokens).to(device)
        tokens[:, 0] = state.root
        return TreeBatch(tokens, torch.from_numpy(trie.parents).to(device), torch.from_numpy(trie.num_nodes).to(device),
                         logp=torch.from_numpy(trie.logp()).to(device), max_depth=self.continuation)

    def _context(self, state: DecodeState) -> np.ndarray:
        """[B, max_suffix] int64: each row's last committed tokens, -1 before its start and for finished rows."""
        cols = state.history_len[:, None] - self.max_suffix + np.arange(self.max_suffix)[None, :]
        context = np.take_along_axis(state.history, np.maximum(cols, 0), axis=1)
        keep = (cols >= state.host_start[:, None]) & ~state.finished[:, None]
        return np.where(keep, context, -1)
