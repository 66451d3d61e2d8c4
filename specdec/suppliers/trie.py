"""Merging token continuations into a prefix trie: the tree builder of the host-side suppliers.

Prompt lookup and retrieval both end a step with M candidate continuations per row and need the trie of
their prefixes. The builder is vectorised numpy over rows, continuations and depths: continuations are
sorted lexicographically so that every shared prefix is a contiguous run of rows, and a node is the first
row of such a run. Memory and time are O(B M K log M) (O(B M K) when the caller hands them sorted), so
5000 retrieved continuations per row cost what 5000 rows of K tokens cost.

Worked example, one row, continuations (M = 4, K = 3, -1 pads)::

    [1, 2, 3]        prefixes and counts:  [1] x3   [1,2] x2   [1,5] x1   [1,2,3] x1   [1,2,4] x1
    [1, 2, 4]        nodes (breadth first, then first occurrence):
    [1, 5, -1]          tokens  = [root, 1, 2, 5, 3, 4]     parents = [-1, 0, 1, 1, 2, 2]
    [-1, -1, -1]        counts  = [3,    3, 2, 1, 1, 1]     (root: the number of non-empty continuations)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..planner import StepPlanner, TreeFacts
from ..stages import PlanStats, StepRecord
from ..verify import Acceptance
from .base import Supplier

__all__ = ["PlannedTrieSupplier", "Trie", "prefix_trie", "plan_trie"]


@dataclass(frozen=True)
class Trie:
    """Per-row tries in breadth-first order (parents before children), node 0 the root.

    tokens:    [B, T] int64; column 0 is a placeholder for the root (the caller writes the root token).
    parents:   [B, T] int64; -1 for the root and for padding nodes.
    num_nodes: [B] int64; nodes per row, the root included.
    counts:    [B, T] int64; continuations that start with the node's prefix (root: all non-empty ones).
    """

    tokens: np.ndarray
    parents: np.ndarray
    num_nodes: np.ndarray
    counts: np.ndarray

    def logp(self) -> np.ndarray:
        """[B, T] float32: log of each node's relative frequency among the row's continuations (root: 0).

        This is the path probability of the node's prefix under the empirical continuation distribution,
        the quantity a draft model's path log-prob estimates; padding nodes get -inf.
        """
        total = np.maximum(self.counts[:, :1], 1)
        with np.errstate(divide="ignore"):
            out = np.log(self.counts / total).astype(np.float32)
        out[:, 0] = 0.0
        return out

    def select(self, keep: np.ndarray) -> "Trie":
        """The sub-trie of the nodes where keep [B, T] bool is set (the root is always kept).

        `keep` must be prefix-closed; node order (and so topological order) is preserved.
        """
        keep = keep & (np.arange(self.tokens.shape[1])[None, :] < self.num_nodes[:, None])
        keep[:, 0] = True
        new = np.cumsum(keep, axis=1) - 1  # [B, T]: new index of each kept node
        num_nodes = keep.sum(1).astype(np.int64)
        T = int(num_nodes.max())
        B = keep.shape[0]
        tokens, counts = np.zeros((B, T), dtype=np.int64), np.zeros((B, T), dtype=np.int64)
        parents = np.full((B, T), -1, dtype=np.int64)
        b, i = np.nonzero(keep)
        tokens[b, new[b, i]] = self.tokens[b, i]
        counts[b, new[b, i]] = self.counts[b, i]
        up = self.parents[b, i]
        parents[b, new[b, i]] = np.where(up >= 0, new[b, np.maximum(up, 0)], -1)
        return Trie(tokens, parents, num_nodes, counts)


def prefix_trie(cont: np.ndarray, *, budget: int | None = None, presorted: bool = False) -> Trie:
    """Merge [B, M, K] continuations (-1 padded at the end, so valid tokens form a prefix) into tries.

    budget:    the most nodes a row keeps, root included; the kept prefixes are the most frequent ones
               (ties: shallower first, then first occurrence), which keeps the set prefix-closed because a
               prefix is at least as frequent as any extension of it. None keeps every prefix.
    presorted: the caller guarantees each row's continuations are already in lexicographic order (with
               -1 below every token), as suffix-array ranges are; skips the sort.
    Node order: by depth, then by the first continuation (in the caller's order) that reaches the node.
    """
    if cont.ndim != 3:
        raise ValueError(f"cont: expected [B, M, K], got shape {cont.shape}")
    if budget is not None and budget < 1:
        raise ValueError(f"budget: expected >= 1 (the root), got {budget}")
    B, M, K = cont.shape
    cont = np.where(np.cumprod(cont >= 0, axis=-1).astype(bool), cont, -1)  # nothing valid after a -1
    order = np.broadcast_to(np.arange(M), (B, M))
    if not presorted and M > 1:
        keys = [cont[:, :, j].ravel() for j in range(K - 1, -1, -1)] + [np.repeat(np.arange(B), M)]
        order = (np.lexsort(keys) - (np.repeat(np.arange(B), M) * M)).reshape(B, M)  # within-row order
        cont = np.take_along_axis(cont, order[:, :, None], axis=1)
    rows = _runs(cont, order)
    keep = rows.is_node
    if budget is not None:
        keep = _most_frequent(rows, budget - 1)
    return _assemble(cont, rows, keep)


@dataclass(frozen=True)
class _Runs:
    """Per (row b, sorted continuation i, depth j): the run of continuations sharing cont[b, i, :j+1]."""

    is_node: np.ndarray  # [B, M, K] bool: (i, j) is the first of its run and the token is valid
    count: np.ndarray  # [B, M, K] int64: run length, valid at nodes
    first: np.ndarray  # [B, M, K] int64: smallest caller index in the run, valid at nodes
    head: np.ndarray  # [B, M, K] int64: the first sorted index of the run that contains (i, j)


def _runs(cont: np.ndarray, order: np.ndarray) -> _Runs:
    B, M, K = cont.shape
    same = np.zeros((B, M, K), dtype=bool)
    same[:, 1:] = np.cumprod(cont[:, 1:] == cont[:, :-1], axis=-1).astype(bool)  # prefix equal to previous row
    starts = ~same  # [B, M, K]: a run of equal prefixes through depth j starts at (i, j)
    # Runs never cross rows or depths in (b, j, i) order, because i = 0 always starts one.
    flat = starts.transpose(0, 2, 1).ravel()
    begin = np.flatnonzero(flat)
    length = np.diff(np.append(begin, flat.size))
    first = np.minimum.reduceat(np.broadcast_to(order[:, None, :], (B, K, M)).ravel(), begin)
    count = np.zeros(flat.size, dtype=np.int64)
    count[begin] = length
    low = np.zeros(flat.size, dtype=np.int64)
    low[begin] = first
    index = np.arange(M)[None, None, :]
    head = np.maximum.accumulate(np.where(starts.transpose(0, 2, 1), index, 0), axis=-1)  # [B, K, M]
    back = (0, 2, 1)
    return _Runs(starts & (cont >= 0), count.reshape(B, K, M).transpose(back),
                 low.reshape(B, K, M).transpose(back), head.transpose(back))


def _most_frequent(rows: _Runs, limit: int) -> np.ndarray:
    """[B, M, K] bool: each row's `limit` most frequent nodes (ties: shallower, then first occurrence)."""
    B, M, K = rows.is_node.shape
    if limit <= 0:
        return np.zeros_like(rows.is_node)
    depth = np.arange(K)[None, None, :]
    # one int64 key, unique per node: count descending, then depth, then first occurrence
    key = (M - rows.count) * (K * M) + depth * M + rows.first
    key = np.where(rows.is_node, key, np.iinfo(np.int64).max).reshape(B, M * K)
    if limit < M * K:
        cut = np.partition(key, limit - 1, axis=1)[:, limit - 1:limit]
        key_ok = key <= cut
    else:
        key_ok = np.ones_like(key, dtype=bool)
    return rows.is_node & key_ok.reshape(B, M, K)


def _assemble(cont: np.ndarray, rows: _Runs, keep: np.ndarray) -> Trie:
    """Number the kept nodes breadth first (then by first occurrence) and link them to their parents."""
    B, M, K = cont.shape
    num_nodes = 1 + keep.sum((1, 2))
    T = int(num_nodes.max())
    depth = np.broadcast_to(np.arange(K)[None, None, :], (B, M, K))
    key = np.where(keep, depth * M + rows.first, np.iinfo(np.int64).max).reshape(B, M * K)
    if 1 < T <= M * K:  # only the first T - 1 ranks matter: select them, then sort those
        part = np.argpartition(key, T - 2, axis=1)[:, : T - 1]
        rank = np.take_along_axis(part, np.argsort(np.take_along_axis(key, part, axis=1), axis=1), axis=1)
    else:
        rank = np.argsort(key, axis=1)[:, : T - 1]  # [B, T - 1]: flat (i, j) of node 1, 2, ...
    node_of = np.zeros((B, M * K), dtype=np.int64)
    np.put_along_axis(node_of, rank, np.arange(1, T)[None, :], axis=1)
    node_of = np.where(keep.reshape(B, M * K), node_of, 0).reshape(B, M, K)
    tokens = np.zeros((B, T), dtype=np.int64)
    parents = np.full((B, T), -1, dtype=np.int64)
    counts = np.zeros((B, T), dtype=np.int64)
    b, i, j = np.nonzero(keep)
    node = node_of[b, i, j]
    tokens[b, node] = cont[b, i, j]
    counts[b, node] = rows.count[b, i, j]
    jp = np.maximum(j - 1, 0)
    parents[b, node] = np.where(j > 0, node_of[b, rows.head[b, i, jp], jp], 0)
    counts[:, 0] = (cont[:, :, 0] >= 0).sum(1)
    return Trie(tokens, parents, num_nodes.astype(np.int64), counts)


class PlannedTrieSupplier(Supplier):
    """The planner's side of a supplier whose candidates are a `Trie` of matched continuations (retrieval,
    prompt lookup): with a `planner`, each step's timings and the target's verdict on the trie (which
    calibrates the match shares) go to it. Subclasses set `planner` (None: unplanned), `_facts` and
    `_trie` (the step's, or None) in `propose`."""

    planner: StepPlanner | None = None
    _facts: TreeFacts | None = None
    _trie: Trie | None = None

    def record_step(self, step: StepRecord) -> None:
        if self.planner is not None:
            self.planner.record(step, self._facts)

    def commit(self, acc: Acceptance) -> None:
        trie, self._trie = self._trie, None
        if trie is not None:
            parent_counts = np.take_along_axis(trie.counts, np.maximum(trie.parents, 0), 1)
            self.planner.observe_tree(trie.tokens, trie.parents, trie.num_nodes,
                                      trie.counts / np.maximum(parent_counts, 1), acc.host_tokens, acc.host_num_accepted)

    def report(self) -> PlanStats | None:
        return None if self.planner is None else self.planner.report()


# ------------------------------------------------------------------------------- SMART's rule on a trie
def plan_trie(parents: np.ndarray, counts: np.ndarray, num_nodes: np.ndarray, planner: StepPlanner, alpha: float,
              benefit: str) -> tuple[np.ndarray, np.ndarray, int]:
    """SMART's rule on a host-side trie (retrieval, prompt lookup), priced by the planner's step cost.

    parents, counts: [B, T] int64 of a trie in breadth-first order (`suppliers.trie.Trie`). A node's
    conditional probability is its share of its parent's matches, calibrated by the planner's
    `Calibration`; its path probability, the product along its path. Per row, nodes join in that order
    (ties: node index, so parents come first) while each passes ``alpha * dL(u) * C(|T|) > L(T) * (V(|T| +
    1) - V(|T|))`` with C the step's cost so far (query, loop) plus the corrected verification V;
    dL(u) = its calibrated path probability, over the tree's leaves before it joins for benefit "paper".
    Returns keep [B, T] bool (prefix-closed, the root always), the conditional probabilities [B, T] (what
    `StepPlanner.observe_tree` calibrates on) and the kept tree's depth.
    """
    B, T = parents.shape
    node = np.arange(T)[None, :]
    real = (node >= 1) & (node < num_nodes[:, None])
    edge = np.where(real, counts / np.maximum(np.take_along_axis(counts, np.maximum(parents, 0), 1), 1), 1.0)
    log_cal = _path_sum(np.where(real, np.log(np.maximum(planner.calibration(edge), 1e-12)), 0.0), parents, real)
    order = np.argsort(np.where(real, -log_cal, np.inf), axis=1, kind="stable")[:, : T - 1]
    valid = np.take_along_axis(real, order, axis=1)  # [B, J]: candidate j is node order[b, j]
    calibrated = np.where(valid, np.exp(np.take_along_axis(log_cal, order, axis=1)), 0.0)
    length = 1.0 + np.cumsum(calibrated, axis=1) - calibrated  # L_j: the tree before candidate j joins
    gain = alpha * calibrated / (_leaves_before(parents, order, valid) if benefit == "paper" else 1.0)
    size = 1 + np.arange(T - 1)  # |T|_j
    verify = planner.costs.verify_array(planner.context)
    top = len(verify) - 2
    cost = planner.spent(0, []) + verify[np.minimum(size, top)]
    slope = verify[np.minimum(size + 1, top + 1)] - verify[np.minimum(size, top)]
    ok = valid & (gain * cost > length * np.maximum(slope, 1e-12))
    joined = np.cumprod(ok, axis=1).astype(bool)
    keep = np.zeros((B, T), dtype=bool)
    np.put_along_axis(keep, order, joined, axis=1)
    keep[:, 0] = True
    depth = _path_sum(real.astype(np.float64), parents, real)
    return keep, edge, int(depth[keep].max())


def _path_sum(values: np.ndarray, parents: np.ndarray, real: np.ndarray) -> np.ndarray:
    """[B, T]: each node's value summed with its ancestors' (pointer jumping over the parents)."""
    total = values.copy()
    jump = np.where(real, parents, -1)
    for _ in range(max(1, math.ceil(math.log2(parents.shape[1] + 1)))):
        has = jump >= 0
        safe = np.maximum(jump, 0)
        total = total + np.where(has, np.take_along_axis(total, safe, axis=1), 0.0)
        jump = np.where(has, np.take_along_axis(jump, safe, axis=1), -1)
    return total


def _leaves_before(parents: np.ndarray, order: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[B, J] float: leaves (root-to-leaf paths) of the tree just before candidate j joins, in `order`.

    A node adds a leaf unless it is the first of its parent's children to join (then the parent stops
    being one); the root alone is one path.
    """
    B, J = order.shape
    rows = np.arange(B)[:, None]
    parent = np.take_along_axis(parents, order, axis=1)  # [B, J]
    first = np.full(parents.shape, J, dtype=np.int64)  # first join position among each node's children
    np.minimum.at(first, (np.broadcast_to(rows, (B, J))[valid], parent[valid]),
                  np.broadcast_to(np.arange(J), (B, J))[valid])
    adds = valid & (first[rows, np.maximum(parent, 0)] != np.arange(J)[None, :])
    return 1.0 + np.cumsum(adds, axis=1) - adds
