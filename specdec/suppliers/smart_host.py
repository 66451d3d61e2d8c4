"""SMART's trees built on the host: the draft's candidates come from the device, the rule runs in numpy.

Per layer the device does only what needs the logits: each frontier node's top-k children and their
log-probabilities (a top-k and a log-softmax over the vocabulary). The candidates, [B, w, k], come to the
host with the layer's one sync, where SMART's rule and the tree's bookkeeping run in numpy: on a CPU the
arrays are the tensors' own memory and a numpy call on them costs about a microsecond against several for
a torch call (measured on the demo pair: the device-side version of this layer cost 0.8 ms, mostly the
overhead of ~60 small torch calls, against about 0.1 ms here). On a GPU the copy is a few KB.

SMART's rule itself, and the Python-float form both trees run it in for small layers and pools, is
`smart_rule`'s.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ..ops.smart_expand import _top_children
from .smart_rule import Rule, batch_counts, candidate_gains, row_counts

__all__ = ["HostTree", "PoolTree", "candidates"]

SMALL = 16  # candidates in a layer (rows x frontier x k) up to which `HostTree.grow` runs in Python floats


def candidates(logits: Tensor, k: int, vocab: tuple[np.ndarray, Callable[[Tensor], Tensor]] | None = None
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each frontier node's top-k children: tokens [B, w, k] int64 (logit descending, token id ascending)
    and their conditional log-probabilities [B, w, k] float32, on the host. logits: [B, w, V], any device.

    vocab: (ids, widen) when the logits are over a draft vocabulary (an EAGLE-3 head's): ids [V] int64, the
    target id of each column, and widen, which spreads such logits over the target's vocabulary (-inf
    elsewhere). On a CPU the draft's columns decide unless two of their k + 1 largest tie, which the host
    reads from the values it brings back anyway; a tie (and any other device) takes the widened logits, so
    the children are exactly those of the widened logits (measured on the embedded head, V 2048 of 4096:
    the widening and a top-k and softmax over twice the columns were about half of this function's time).
    """
    x = logits.detach().float()
    if vocab is not None:
        ids, widen = vocab
        if x.device.type == "cpu" and k < x.shape[-1]:
            values, index = torch.topk(x, k + 1, dim=-1)
            top = values.numpy()
            if not (top[..., :-1] == top[..., 1:]).any():  # no tie: topk's value order is the key order
                index = index[..., :k]
                logp = torch.log_softmax(x, dim=-1).gather(-1, index)
                return ids[index.numpy()], logp.numpy()
        x = widen(x)
    tokens = _top_children(x, k)
    logp = torch.log_softmax(x, dim=-1).gather(-1, tokens)
    return tokens.cpu().numpy(), logp.cpu().numpy()  # the layer's one sync, deliberate (module docstring)


class HostTree:
    """One step's trees under construction, a row per batch row, in numpy.

    tokens, parents: [B, M + 1] int64, logp: [B, M + 1] float32 (raw path log-probs), edge: [B, M + 1] (each
    node's conditional probability), cal: [B, M + 1] (calibrated path probabilities); node 0 the root,
    nodes in layer order and, within a layer, best first; size [B]; length [B] (L); paths [B] (leaves).
    The frontier: the nodes whose children the next candidates are.
    """

    def __init__(self, root: np.ndarray, budget: int):
        B = root.shape[0]
        self.tokens = np.zeros((B, budget + 1), dtype=np.int64)
        self.parents = np.full((B, budget + 1), -1, dtype=np.int64)
        self.logp = np.zeros((B, budget + 1), dtype=np.float32)
        self.edge = np.ones((B, budget + 1))
        self.cal = np.ones((B, budget + 1))
        self.tokens[:, 0] = root
        self.size = np.ones(B, dtype=np.int64)
        self.depth = np.zeros(B, dtype=np.int64)  # each row's own depth
        self.length = np.ones(B)
        self.paths = np.ones(B)
        self.front_node = np.zeros((B, 1), dtype=np.int64)
        self._front_active = np.ones((B, 1), dtype=bool)
        self._rows = np.arange(B)

    def grow(self, tokens: np.ndarray, child_logp: np.ndarray, rule: Rule) -> np.ndarray:
        """Add one layer: the children [B, w, k] of the frontier that pass `rule`. Returns the kept
        candidates' calibrated probabilities [B, w * k], each row's kept ones first, best first."""
        if tokens.size <= SMALL:
            return self._grow_small(tokens, child_logp, rule)
        return self._grow_rows(tokens, child_logp, rule)

    def _grow_rows(self, tokens: np.ndarray, child_logp: np.ndarray, rule: Rule) -> np.ndarray:
        """`grow` for any number of rows, in numpy."""
        # Index arrays rather than take_along_axis / repeat / pad: a few microseconds each on these [B, <= 64]
        # arrays, where the wrappers cost about ten, and a layer runs about twenty of them (with EAGLE at
        # batch 1 on a CPU the host work was a fifth of a drafting step)
        B, w, k = tokens.shape
        rows = self._rows[:, None]
        front = self.front_node[:, :w]  # [B, w]
        flat_tokens, flat_logp = tokens.reshape(B, w * k), child_logp.reshape(B, w * k)
        edge = np.exp(flat_logp.astype(np.float64))
        parent_cal = self.cal[rows, front] * self._front_active[:, :w]  # 0 under inactive slots
        cal = (parent_cal[:, :, None] * rule.calibrate(edge).reshape(B, w, k)).reshape(B, w * k)
        order = np.argsort(-cal, axis=1, kind="stable")
        c_cal = cal[rows, order]
        c_slot = order // k
        keep = self._keep(c_cal, c_slot, rule)
        b, j = np.nonzero(keep)
        flat = order[b, j]  # the kept candidates' index in [w * k]
        parent = front[b, flat // k]
        node = self.size[b] + j
        self.tokens[b, node] = flat_tokens[b, flat]
        self.parents[b, node] = parent
        self.logp[b, node] = self.logp[b, parent] + flat_logp[b, flat]
        self.edge[b, node] = edge[b, flat]
        self.cal[b, node] = c_cal[b, j]
        fed = np.zeros((B, w), dtype=bool)  # frontier nodes that got a child: no longer leaves
        fed[b, flat // k] = True
        count = keep.sum(1)
        self.depth += count > 0
        self.paths += count - fed.sum(1)
        kept = np.where(keep, c_cal, 0.0)
        self.length += kept.sum(1)
        self._first_new = self.size.copy()
        self.size += count
        self._cand_tok, self._cand_slot, self._keep_mask = flat_tokens[rows, order], c_slot, keep
        return kept

    def _grow_small(self, tokens: np.ndarray, child_logp: np.ndarray, rule: Rule) -> np.ndarray:
        """`grow` for a layer of at most `SMALL` candidates, the rule in Python floats: `_grow_rows` runs ~80
        numpy calls a layer, whose fixed cost outweighs the arithmetic of a few candidates (timed alone on
        the 2-core CPU: 152 against 87 us at batch 1, 246 against 203 us at batch 4 with 16 candidates;
        at 32 candidates numpy was the faster, hence `SMALL`). The same operations in the same order as
        `_grow_rows`, `_keep` and `_keep_batch` (the sums numpy reduces pairwise are left to numpy), so the
        same tree to the bit (tested against them)."""
        B, w, k = tokens.shape
        wk = w * k
        flat_tokens, flat_logp = tokens.reshape(B, wk), child_logp.reshape(B, wk)
        edge = np.exp(flat_logp.astype(np.float64))
        calibrated = rule.calibrate(edge).tolist()
        parent_cal = (self.cal[self._rows[:, None], self.front_node[:, :w]] * self._front_active[:, :w]).tolist()
        sizes, lengths, paths = self.size.tolist(), self.length.tolist(), self.paths.tolist()
        cal, order, gains, befores = [], [], [], []
        for b in range(B):  # each row's candidates by calibrated probability, their gain and the L before them
            row = [parent_cal[b][i // k] * c for i, c in enumerate(calibrated[b])]
            by = sorted(range(wk), key=lambda i: -row[i])  # stable: ties keep the lower index
            c_row = [row[i] for i in by]
            gain, before = candidate_gains(c_row, [i // k for i in by], paths[b], rule)
            cal.append(c_row)
            order.append(by)
            gains.append(gain)
            befores.append(before)
        if rule.batch and B > 1:
            keep = batch_counts(cal, gains, befores, sizes, self.length.sum(), rule)
        else:
            keep = row_counts(cal, gains, befores, sizes, lengths, rule)
        kept = np.zeros((B, wk))
        fed = np.zeros((B, w), dtype=bool)
        for b in range(B):
            size, front = sizes[b], self.front_node[b]
            for j in range(keep[b]):
                i = order[b][j]
                node, slot = size + j, i // k
                parent = front[slot]
                self.tokens[b, node] = flat_tokens[b, i]
                self.parents[b, node] = parent
                self.logp[b, node] = self.logp[b, parent] + flat_logp[b, i]
                self.edge[b, node] = edge[b, i]
                self.cal[b, node] = kept[b, j] = cal[b][j]
                fed[b, slot] = True
        count = np.array(keep, dtype=np.int64)
        self.depth += count > 0
        self.paths += count - fed.sum(1)
        self.length += kept.sum(1)
        self._first_new = self.size.copy()
        self.size += count
        index = np.array(order, dtype=np.int64)
        self._cand_tok, self._cand_slot = flat_tokens[self._rows[:, None], index], index // k
        self._keep_mask = np.arange(wk) < count[:, None]
        return kept

    def frontier(self, w: int, first_slot: int) -> tuple[np.ndarray, np.ndarray]:
        """Make each row's w best kept nodes of the newest layer the frontier; returns their tokens [B, w]
        and their parents' tree-region slots [B, w] (the parents' layer started at `first_slot`)."""
        B, FK = self._keep_mask.shape
        take = min(w, FK)
        active = np.zeros((B, w), dtype=bool)
        active[:, :take] = self._keep_mask[:, :take]
        tokens = np.zeros((B, w), dtype=np.int64)
        tokens[:, :take] = np.where(active[:, :take], self._cand_tok[:, :take], 0)
        parent = np.full((B, w), first_slot, dtype=np.int64)
        parent[:, :take] += np.where(active[:, :take], self._cand_slot[:, :take], 0)
        # A row that kept fewer than w has inactive slots past its nodes; a full row's would point past the
        # arrays (a row at the budget beside one that grew: IndexError at batch > 1), so they point at the
        # spare column, read only times the slot's inactive flag (0).
        self.front_node = np.minimum(self._first_new[:, None] + np.arange(w), self.tokens.shape[1] - 1)
        self._front_active = active
        return tokens, parent

    def _keep(self, cal: np.ndarray, slot: np.ndarray, r: Rule) -> np.ndarray:
        """[B, F*k] bool, a prefix of each row: the candidates `r` keeps (`smart_rule`); cal [B, F*k]
        sorted descending (0: inactive), slot: each one's frontier slot."""
        B, FK = cal.shape
        j = np.arange(FK)
        n = self.size[:, None] + j  # |T|_j
        active = cal > 0
        before = np.cumsum(cal, axis=1) - cal
        gain = r.alpha * cal
        if r.paper:  # a candidate after a sibling adds a leaf; the first child of a frontier node does not
            sibling = ((slot[:, :, None] == slot[:, None, :]) & (j[None, :, None] > j[None, None, :])).any(2) & active
            gain = gain / (self.paths[:, None] + np.cumsum(sibling, axis=1) - sibling)
        v = r.verify
        top = len(v) - 2
        if r.batch and B > 1:
            return self._keep_batch(cal, gain, n, before, active, r)
        value = r.spent + v[np.minimum(n, top)]
        slope = v[np.minimum(n + 1, top + 1)] - v[np.minimum(n, top)]
        tree_len = self.length[:, None] + before
        ok = active & (gain * value > tree_len * np.maximum(slope, 1e-12)) & (n + 1 <= r.budget)
        return np.cumprod(ok, axis=1).astype(bool)

    def _keep_batch(self, cal: np.ndarray, gain: np.ndarray, n: np.ndarray, before: np.ndarray, active: np.ndarray,
                    r: Rule) -> np.ndarray:
        """The batch rule (`smart_rule`): candidates under the padded width W one by one, each column
        past it for the whole batch. cal, gain, n (|T|_j), before: [B, F*k]; active: [B, F*k] bool."""
        B, FK = cal.shape
        v, top = r.verify, len(r.verify) - 2
        wide = int(self.size.max())
        under = n < wide  # joins as node n < W: fits under the padded width
        share = (v[min(wide + 1, top + 1)] - v[min(wide, top)]) / B
        total = self.length.sum()
        ok_under = active & under & (gain * (r.spent + v[min(wide, top)]) > (total + before) * max(share, 1e-12))
        ok_under &= n + 1 <= r.budget
        run = np.cumprod(ok_under | ~under, axis=1).astype(bool)  # every under-width candidate before passed
        widening = active & ~under & run & (n + 1 <= r.budget)
        col = np.where(widening, n - wide, FK)  # column index past W (FK: none)
        rows = np.nonzero(widening)
        col_gain = np.bincount(col[rows], weights=gain[rows], minlength=FK)[:FK]
        col_cal = np.bincount(col[rows], weights=cal[rows], minlength=FK)[:FK]
        width = np.minimum(wide + np.arange(FK), top)
        length = total + (cal * ok_under).sum() + np.cumsum(col_cal) - col_cal  # the batch's L before column c
        slope = v[np.minimum(width + 1, top + 1)] - v[width]
        col_ok = np.cumprod((col_gain > 0) & (col_gain * (r.spent + v[width]) > length * np.maximum(slope, 1e-12)))
        keep = ok_under | (widening & col_ok.astype(bool)[np.minimum(col, FK - 1)])
        return np.cumprod(keep, axis=1).astype(bool)


class PoolTree:
    """One step's candidates pooled over every layer drafted, a row per batch row (``selection="global"``).

    Every candidate a layer brings (each frontier node's top-k children) joins its row's pool with its
    calibrated path probability P (its parent's P times the calibration of its conditional probability).
    The tree is each row's longest prefix of its pool, in P order, that passes the rule (`Rule`, with
    |T| and L counted from the root alone): one ranking over all depths, as EAGLE-2 re-ranks its pool. The
    layered rule (`HostTree.grow`) keeps or drops a layer's candidates before it sees the next layer's,
    weighing the first layers against a tree of one node, so it keeps shallow siblings a deeper node would
    have beaten. A child's P is at most its parent's, so a prefix in P order (ties: the older candidate
    first) holds every node's parent: it is a tree, in topological order. The next layer forwards each
    row's best candidates of the newest layer (the frontier), whether or not the prefix holds them yet.

    Python lists, numpy only where a layer's arrays arrive and the tree leaves: in the loop each numpy call
    costs 1.5-3x what it costs alone on the 2-core CPU (the host's caches cold after the forwards:
    bench/results/2026-12-07-cpu-selection/), and a numpy version needs some fifty calls a layer where this
    one needs a handful. Pool ids: 0 is the root, a row's candidate i is node i + 1.
    """

    def __init__(self, root: np.ndarray):
        B = root.shape[0]
        self.root, self.batch_size = root, B  # the rule's budget comes with each `select`
        self.tokens: list[list[int]] = [[] for _ in range(B)]
        self.parents: list[list[int]] = [[] for _ in range(B)]  # pool id of each candidate's parent (0: root)
        self.logp: list[list[float]] = [[] for _ in range(B)]  # raw path log-probabilities
        self.edge: list[list[float]] = [[] for _ in range(B)]  # conditional probabilities under the drafter
        self.cal: list[list[float]] = [[] for _ in range(B)]  # calibrated path probabilities (0: inactive)
        self.layer: list[list[int]] = [[] for _ in range(B)]  # each candidate's depth
        self.front: list[list[int]] = [[0] for _ in range(B)]  # the frontier's pool ids (0: the root)
        self.kept = [0] * B  # each row's prefix length (`select`)
        self.length = [1.0] * B  # each row's L
        self._order: list[list[int]] = [[] for _ in range(B)]  # each row's pool in P order
        self._newest = (0, 0)  # the newest layer's candidates: first pool index and count (every row alike)

    def add(self, tokens: np.ndarray, child_logp: np.ndarray, calibrate: Callable[[np.ndarray], np.ndarray]) -> None:
        """The children [B, w, k] of the frontier (its first w nodes) join the pools."""
        B, w, k = tokens.shape
        edge = np.exp(child_logp.astype(np.float64))
        calibrated, edge = calibrate(edge).tolist(), edge.tolist()
        toks, lps = tokens.tolist(), child_logp.tolist()
        self._newest = (len(self.tokens[0]), w * k)
        for b in range(B):
            tok, par, lp, ed, cal, lay = (self.tokens[b], self.parents[b], self.logp[b], self.edge[b], self.cal[b],
                                          self.layer[b])
            for s, node in enumerate(self.front[b][:w]):  # node -1: an inactive slot
                p_cal = 1.0 if node == 0 else 0.0 if node < 0 else cal[node - 1]
                p_lp, depth = (0.0, 1) if node <= 0 else (lp[node - 1], lay[node - 1] + 1)
                for j in range(k):
                    tok.append(toks[b][s][j])
                    par.append(max(node, 0))
                    lp.append(p_lp + lps[b][s][j])
                    ed.append(edge[b][s][j])
                    cal.append(p_cal * calibrated[b][s][j])
                    lay.append(depth)

    @classmethod
    def from_layers(cls, root: np.ndarray, table: np.ndarray, sizes: list[int],
                    calibrate: Callable[[np.ndarray], np.ndarray]) -> "PoolTree":
        """A pool of every layer drafted at once (``early_stop=False``: `SmartSupplier._draft_pooled`).
        table: [3, B, N] float64, each candidate's token, conditional log-probability under the drafter and
        parent (its index among the layer before's candidates; -1: the root), layer after layer of sizes[d]
        candidates. A candidate's P is its parent's times the calibration of its conditional probability.
        The pool is final: `select`, `tree` and `widths_by_depth` read it; no layer joins it (`add`)."""
        pool = cls(root)
        tokens, edge_lp, parent = table[0].astype(np.int64), table[1], table[2].astype(np.int64)
        B, N = tokens.shape
        edge = np.exp(edge_lp)
        calibrated = calibrate(edge)
        cal, logp = np.empty((B, N)), np.empty((B, N))
        pool_parent, layer = np.zeros((B, N), dtype=np.int64), np.empty(N, dtype=np.int64)
        rows, start, before = np.arange(B)[:, None], 0, 0
        for depth, n in enumerate(sizes, 1):
            part = slice(start, start + n)
            if depth == 1:
                cal[:, part], logp[:, part] = calibrated[:, part], edge_lp[:, part]
            else:
                up = before + parent[:, part]  # the parents' flat indices
                cal[:, part] = cal[rows, up] * calibrated[:, part]
                logp[:, part] = logp[rows, up] + edge_lp[:, part]
                pool_parent[:, part] = up + 1  # pool ids: candidate i is node i + 1
            layer[part] = depth
            before, start = start, start + n
        pool.tokens, pool.parents = tokens.tolist(), pool_parent.tolist()
        pool.logp, pool.edge, pool.cal = logp.tolist(), edge.tolist(), cal.tolist()
        depths = layer.tolist()
        pool.layer = [depths.copy() for _ in range(B)]
        pool._newest = (N - sizes[-1], sizes[-1])
        return pool

    def newest_active(self) -> bool:
        """Whether any row's newest layer holds a candidate that may join (P > 0)."""
        first, count = self._newest
        return any(c > 0 for row in self.cal for c in row[first:first + count])

    def select(self, rule: Rule) -> int:
        """Each row's longest prefix of its pool, in P order, that passes `rule`; returns the padded width."""
        B, rows = self.batch_size, rule.rows
        weight = rows.weight if rows is not None else (1.0,) * B
        cal, seen, gains, befores = [], [], [], []
        for b in range(B):
            row = self.cal[b]
            order = sorted(range(len(row)), key=lambda i: -row[i])  # stable: ties keep the older candidate
            if rows is not None:  # nodes too deep to emit a token are not candidates (their children neither)
                layer, deepest = self.layer[b], rows.depth[b]
                order = [i for i in order if layer[i] <= deepest]
            c_row = [row[i] for i in order]
            w = weight[b]
            s_row = c_row if w == 1.0 else [c * w for c in c_row]
            gain, before = candidate_gains(s_row, [self.parents[b][i] for i in order], 1.0, rule)
            self._order[b] = order
            cal.append(c_row)
            seen.append(s_row)
            gains.append(gain)
            befores.append(before)
        ones = [1] * B
        if rule.batch and B > 1:
            self.kept = batch_counts(seen, gains, befores, ones, float(sum(weight)), rule)
        else:  # the row rule weighs a row against itself: only a weight of 0 (no candidate) changes it
            self.kept = row_counts(seen, gains, befores, ones, list(weight), rule)
        self.length = [1.0 + sum(c_row[:m]) for c_row, m in zip(cal, self.kept)]
        return max(self.kept) + 1

    def frontier(self, w: int, first_slot: int, k: int) -> tuple[np.ndarray, np.ndarray, list[float]]:
        """Make each row's w best candidates of the newest layer the frontier (a row with fewer active ones
        gets inactive slots: token 0); returns their tokens [B, w], their parents' tree-region slots [B, w]
        (the parents' layer was forwarded from `first_slot`, a candidate's parent is its slot // k) and, per
        column, the summed P of the rows' candidates in it (the most forwarding them can add)."""
        first, count = self._newest
        tokens = np.zeros((self.batch_size, w), dtype=np.int64)
        parent = np.full((self.batch_size, w), first_slot, dtype=np.int64)
        bounds = [0.0] * w
        for b in range(self.batch_size):
            cal = self.cal[b]
            best = sorted(range(count), key=lambda i: -cal[first + i])[:w]
            front = []
            for col, i in enumerate(best):
                c = cal[first + i]
                if c > 0:
                    tokens[b, col] = self.tokens[b][first + i]
                    parent[b, col] += i // k
                    bounds[col] += c
                    front.append(first + i + 1)
                else:
                    front.append(-1)
            self.front[b] = front + [-1] * (w - len(front))
        return tokens, parent, bounds

    def narrow(self, w: int) -> None:
        """Keep the frontier's first w slots (the layer forwards only those)."""
        self.front = [front[:w] for front in self.front]

    def widths_by_depth(self) -> tuple[int, ...]:
        """The selected trees' padded width counting their nodes down to depth d, for d = 1 .. their depth
        (the last is the final width); (1,) for root-only trees."""
        depths = [[self.layer[b][i] for i in self._order[b][:m]] for b, m in enumerate(self.kept)]
        reached = max((max(d) for d in depths if d), default=0)
        if not reached:
            return (1,)
        return tuple(max(sum(1 for x in d if x <= depth) for d in depths) + 1 for depth in range(1, reached + 1))

    def tree(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The selected trees, root first, in P order: tokens, parents (tree indices), path log-probabilities
        and conditional probabilities [B, n] (past a row's size: token 0, parent -1, edge 1), size [B] and
        each row's depth [B]."""
        B, n = self.batch_size, max(self.kept) + 1
        tokens = [[0] * n for _ in range(B)]
        parents = [[-1] * n for _ in range(B)]
        logp = [[0.0] * n for _ in range(B)]
        edge = [[1.0] * n for _ in range(B)]
        depth = [0] * B
        for b in range(B):
            tokens[b][0] = int(self.root[b])
            where = {0: 0}  # pool id -> tree index
            for j, i in enumerate(self._order[b][:self.kept[b]], 1):
                where[i + 1] = j
                tokens[b][j] = self.tokens[b][i]
                parents[b][j] = where[self.parents[b][i]]
                logp[b][j] = self.logp[b][i]
                edge[b][j] = self.edge[b][i]
                depth[b] = max(depth[b], self.layer[b][i])
        return (np.array(tokens, dtype=np.int64), np.array(parents, dtype=np.int64),
                np.array(logp, dtype=np.float32), np.array(edge), np.array(self.kept, dtype=np.int64) + 1,
                np.array(depth, dtype=np.int64))
