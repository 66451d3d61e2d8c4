"""Retrieval (REST): candidate trees from the continuations of the context's longest suffix in a datastore.

Per row and step: the longest suffix of the committed context (`max_suffix` tokens down to `min_suffix`,
the root included) that occurs in the datastore, found by binary search over its suffix array; up to
`max_matches` of its occurrences; the `continuation` tokens that follow each (stopping at a document's
end); every prefix of those continuations counted, and the most frequent ones (at most `budget` nodes,
root included) merged into a prefix-closed trie. A node's log-prob is log(count / continuations): the
relative frequency of its prefix, i.e. the path probability of the empirical continuation distribution,
the quantity a draft model's path log-prob estimates (SMART's rule and ValuSpec read it). No match: the
root alone, an autoregressive step.

With `cost_model` (SMART's rule on retrieval trees, beyond both papers): the prefixes join in order of
frequency while each passes SMART's marginal test, frequency standing in for the draft probability,

    alpha * dL(u_j) / dC(|T|_j) > L_j / C(|T|_j),   |T|_j = 1 + j,   L_j = 1 + sum_{i<j} P(u_i)

with dL(u) = P(u) / (leaves of the tree before u joins) ("paper") or P(u) ("expected"), and C the
verification part of the fitted cost (retrieval drafts nothing: lambda is dropped; profile the target
alone so that c0 holds no draft intercept either). `budget` stays the cap. Frequency order is
prefix-closed (a prefix is at least as frequent as its extensions and, at equal counts, shallower), so
every prefix of it is a tree.

Host-side numpy on the committed tokens `DecodeState` keeps on the host (no device sync), vectorised over
rows, suffix lengths, matches and depths; the only loops are the binary search's ceil(log2 N) rounds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch
from transformers import PreTrainedModel

from ..checks import as_int
from ..cost import CostModel, check_compatible
from ..datastore import Datastore
from ..profiling import Profile
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import vocab_size
from .base import Supplier, check_within, position_limit
from .trie import Trie, prefix_trie

__all__ = ["RetrievalSupplier"]


class RetrievalSupplier(Supplier):
    """REST-style retrieval over `datastore` (a `Datastore`, built with the target's tokenizer).

    budget: the largest tree per row, root included (REST's 64 "choices" exclude the root; here the
    budget counts what the target verifies, like `DraftSupplier(total_tokens=...)` and SMART's budget).
    cost_model: a `CostModel` (fitted at the running batch size) or a `Profile` (fitted per batch size on
    first use): SMART's marginal rule sizes each row's tree, up to `budget`; alpha and benefit as SMART's.
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
        self._costs: dict[int, CostModel] = {}  # batch size -> verification-only cost model

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

    def propose(self, state: DecodeState) -> TreeBatch:
        context = self._context(state)  # [B, max_suffix]
        match = self.datastore.longest_match(context, max_suffix=self.max_suffix, min_suffix=self.min_suffix)
        cont = self.datastore.continuations(match, max_matches=self.max_matches, length=self.continuation)
        trie = prefix_trie(cont, budget=self.budget, presorted=True)  # suffix-array order is lexicographic
        if self.cost_source is not None:
            trie = trie.select(smart_keep(trie, self._cost(state.batch_size), self.alpha, self.benefit))
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

    def _cost(self, batch_size: int) -> CostModel:
        """The verification-only cost model at this batch size (fitted once per size from a Profile)."""
        if batch_size not in self._costs:
            model = self.cost_source
            if isinstance(model, Profile):
                model = CostModel.fit(model, batch_size)
            self._costs[batch_size] = replace(model, lam=0.0)  # retrieval runs no draft model
        return self._costs[batch_size]


def smart_keep(trie: Trie, cost: CostModel, alpha: float, benefit: str) -> np.ndarray:
    """[B, T] bool: per row, the longest run of nodes in frequency order passing SMART's test (root kept).

    Frequency order: count descending, then node index (the trie's breadth-first, first-seen order),
    the order in which `prefix_trie` picks its budget, so parents always come before their children.
    """
    B, T = trie.tokens.shape
    node = np.arange(T)[None, :]
    real = (node >= 1) & (node < trie.num_nodes[:, None])
    order = np.argsort(np.where(real, -trie.counts * T + node, np.iinfo(np.int64).max), axis=1, kind="stable")
    order = order[:, : T - 1]  # [B, J]: candidate j is node order[b, j]
    valid = np.take_along_axis(real, order, axis=1)
    prob = np.where(valid, np.take_along_axis(trie.counts, order, axis=1) / np.maximum(trie.counts[:, :1], 1), 0.0)
    size = 1.0 + np.arange(T - 1)[None, :]  # |T|_j: the tree before candidate j joins
    length = 1.0 + np.cumsum(prob, axis=1) - prob  # L_j
    gain = prob / _leaves_before(trie, order, valid) if benefit == "paper" else prob
    ok = valid & (alpha * gain / cost.derivative(size) > length / cost.predict(size))
    keep = np.zeros((B, T), dtype=bool)
    np.put_along_axis(keep, order, np.cumprod(ok, axis=1).astype(bool), axis=1)
    keep[:, 0] = True
    return keep


def _leaves_before(trie: Trie, order: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[B, J] float: leaves (root-to-leaf paths) of the tree just before candidate j joins, in `order`.

    A node adds a leaf unless it is the first of its parent's children to join (then the parent stops
    being one); the root alone is one path.
    """
    B, J = order.shape
    rows = np.arange(B)[:, None]
    parent = np.take_along_axis(trie.parents, order, axis=1)  # [B, J]
    first = np.full(trie.tokens.shape, J, dtype=np.int64)  # first join position among each node's children
    np.minimum.at(first, (np.broadcast_to(rows, (B, J))[valid], parent[valid]),
                  np.broadcast_to(np.arange(J), (B, J))[valid])
    adds = valid & (first[rows, np.maximum(parent, 0)] != np.arange(J)[None, :])
    return 1.0 + np.cumsum(adds, axis=1) - adds
