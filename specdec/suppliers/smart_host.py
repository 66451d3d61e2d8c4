"""SMART's trees built on the host: the draft's candidates come from the device, the rule runs in numpy.

Per layer the device does only what needs the logits: each frontier node's top-k children and their
log-probabilities (a top-k and a log-softmax over the vocabulary). The candidates, [B, w, k], come to the
host with the layer's one sync, where SMART's rule and the tree's bookkeeping run in numpy: on a CPU the
arrays are the tensors' own memory and a numpy call on them costs about a microsecond against several for
a torch call (measured on the demo pair: the device-side version of this layer cost 0.8 ms, mostly the
overhead of ~60 small torch calls, against about 0.1 ms here). On a GPU the copy is a few KB.

A node's calibrated probability is its parent's times the planner's `Calibration` of its conditional
probability under the draft. The rule, per candidate j of a row in order of calibrated probability (ties:
lower candidate index), with |T|_j the tree's size before j joins, V the step's corrected verify curve
(`OnlineCosts.verify_array`) and `spent` what the step paid outside verification so far::

    alpha * P(u_j) / |paths|_j  *  C_j  >  L_j * (V(|T|_j + 1) - V(|T|_j))      C_j = spent + V(|T|_j)

L_j: the row's L (1 + the sum of its nodes' calibrated probabilities) plus the candidates ahead of j;
|paths|_j: the tree's leaves before j joins ("paper"; 1 for "expected"). Batch rule (``batch=True``): a
node that fits under the batch's padded width W costs its share of a column already paid, (V(W + 1) -
V(W)) / B, against the batch's summed L at C = spent + V(W); the columns past W are priced whole: column
c (width c + 1) joins when the summed gain of the rows' candidates landing in it beats
L_batch * (V(c + 1) - V(c)) at C = spent + V(c), columns in order, each row's candidates still a prefix.
The kept candidates are the longest prefix that passes and fits the budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from ..ops.smart_expand import _top_children

__all__ = ["HostTree", "Rule", "candidates"]


def candidates(logits: Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Each frontier node's top-k children: tokens [B, w, k] int64 (logit descending, token id ascending)
    and their conditional log-probabilities [B, w, k] float32, on the host. logits: [B, w, V], any device."""
    x = logits.detach().float()
    tokens = _top_children(x, k)
    logp = torch.log_softmax(x, dim=-1).gather(-1, tokens)
    return tokens.cpu().numpy(), logp.cpu().numpy()  # the layer's one sync, deliberate (module docstring)


@dataclass(frozen=True)
class Rule:
    """One layer's pricing (module docstring): alpha; calibrate (conditional probabilities -> acceptance,
    the planner's `Calibration`); verify [N] float64, the corrected verify seconds of a tree by padded
    width (index 1 continues the tree curve: the jump from a one-node verification to a tree's is the
    planner's to weigh when it decides to draft); spent; budget; paper (the |paths| benefit); batch (the
    padded-width pricing)."""

    alpha: float
    calibrate: Callable[[np.ndarray], np.ndarray]
    verify: np.ndarray
    spent: float
    budget: int
    paper: bool
    batch: bool


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
        if tokens.shape[0] == 1:
            return self._grow_one(tokens, child_logp, rule)
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

    def _grow_one(self, tokens: np.ndarray, child_logp: np.ndarray, rule: Rule) -> np.ndarray:
        """`grow` for one row, the rule in Python floats: at batch 1 a layer offers a handful of candidates,
        and `grow`'s ~50 numpy calls on them (~130 us a layer; the embedded EAGLE head's trees run ~6
        layers a step) cost more than the arithmetic. The same operations in the same order as `grow` and
        `_keep`, so the same tree to the bit (tested against them)."""
        _, w, k = tokens.shape
        flat_tokens, flat_logp = tokens.reshape(w * k), child_logp.reshape(w * k)
        edge = np.exp(flat_logp.astype(np.float64))
        calibrated = rule.calibrate(edge).tolist()
        front = self.front_node[0, :w].tolist()
        live = self._front_active[0, :w].tolist()
        parent_cal = [float(self.cal[0, f]) * a for f, a in zip(front, live)]  # 0 under inactive slots
        cal = [parent_cal[i // k] * c for i, c in enumerate(calibrated)]
        order = sorted(range(w * k), key=lambda i: -cal[i])  # stable: ties keep the lower index
        size, length, paths = int(self.size[0]), float(self.length[0]), float(self.paths[0])
        v, top, budget = rule.verify, len(rule.verify) - 2, rule.budget
        total, leaves, seen, kept_cal = 0.0, 0, set(), []
        for j, i in enumerate(order):
            c = cal[i]
            total += c
            before = total - c
            n = size + j
            gain = rule.alpha * c
            slot = i // k
            if rule.paper:  # a candidate after a sibling adds a leaf; the first child of a frontier node does not
                sibling = slot in seen and c > 0
                gain = gain / (paths + leaves)
                leaves += sibling
            seen.add(slot)
            value = rule.spent + v[min(n, top)]
            slope = v[min(n + 1, top + 1)] - v[min(n, top)]
            if not (c > 0 and gain * value > (length + before) * max(slope, 1e-12) and n + 1 <= budget):
                break
            kept_cal.append(c)
        count = len(kept_cal)
        kept = np.zeros((1, w * k))
        kept[0, :count] = kept_cal
        fed = set()
        for j, i in enumerate(order[:count]):
            node, slot = size + j, i // k
            parent = front[slot]
            self.tokens[0, node] = flat_tokens[i]
            self.parents[0, node] = parent
            self.logp[0, node] = self.logp[0, parent] + flat_logp[i]
            self.edge[0, node] = edge[i]
            self.cal[0, node] = kept_cal[j]
            fed.add(slot)
        self.depth += count > 0
        self.paths += count - len(fed)
        self.length += kept.sum(1)
        self._first_new = self.size.copy()
        self.size += count
        keep = np.zeros((1, w * k), dtype=bool)
        keep[0, :count] = True
        self._cand_tok, self._cand_slot, self._keep_mask = flat_tokens[order][None], np.array([order]) // k, keep
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
        self.front_node = self._first_new[:, None] + np.arange(w)
        self._front_active = active
        return tokens, parent

    def _keep(self, cal: np.ndarray, slot: np.ndarray, r: Rule) -> np.ndarray:
        """[B, F*k] bool, a prefix of each row: the candidates `r` keeps (module docstring); cal [B, F*k]
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
        """The batch rule (module docstring): candidates under the padded width W one by one, each column
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
