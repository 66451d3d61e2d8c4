"""SMART's marginal rule as the host-side trees run it (`smart_host`): its pricing (`Rule`, `RowWeights`)
and its Python-float form (`candidate_gains`, `row_counts`, `batch_counts`).

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

__all__ = ["Rule", "RowWeights", "candidate_gains", "row_counts", "batch_counts"]


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
    rows: "RowWeights | None" = None  # `PoolTree.select` only: what each row's tokens are worth to the batch


@dataclass(frozen=True)
class RowWeights:
    """What a row's accepted tokens are worth to its batch (`PoolTree.select`): weight [B], scaling the row's
    calibrated probabilities under the rule (0: a finished row, whose tree the loop cuts to its root: none of
    its candidates joins); depth [B], the deepest node that can still emit a token (a row with r tokens
    left emits at most r, the bonus included)."""

    weight: tuple[float, ...]
    depth: tuple[int, ...]


def candidate_gains(c_row: list[float], slots: list[int], paths: float,
                    rule: Rule) -> tuple[list[float], list[float]]:
    """A row's candidates in order (calibrated probabilities c_row, their parents' slots): each one's gain
    (alpha P, divided by the leaves before it with the paper's benefit: a candidate after a sibling adds a
    leaf, the first child of a node does not) and the summed P of the candidates before it."""
    gain, before, total, leaves, seen = [], [], 0.0, 0, set()
    for slot, c in zip(slots, c_row):
        total += c
        before.append(total - c)
        g = rule.alpha * c
        if rule.paper:
            sibling = slot in seen and c > 0
            g = g / (paths + leaves)
            leaves += sibling
            seen.add(slot)
        gain.append(g)
    return gain, before


def row_counts(cal: list, gains: list, befores: list, sizes: list, lengths: list, rule: Rule) -> list[int]:
    """Each row's kept count under the row rule (a prefix; `smart_host.HostTree._keep` in Python floats). cal, gains,
    befores: per row, per candidate in order; sizes, lengths: the rows' tree sizes and L."""
    v, top, keep = rule.verify, len(rule.verify) - 2, []
    for b in range(len(cal)):
        count = 0
        for j, c in enumerate(cal[b]):
            n = sizes[b] + j
            value = rule.spent + v[min(n, top)]
            slope = v[min(n + 1, top + 1)] - v[min(n, top)]
            if not (c > 0 and gains[b][j] * value > (lengths[b] + befores[b][j]) * max(slope, 1e-12)
                    and n + 1 <= rule.budget):
                break
            count += 1
        keep.append(count)
    return keep


def batch_counts(cal: list, gain: list, before: list, sizes: list, total: float, r: Rule) -> list[int]:
    """`smart_host.HostTree._keep_batch` in Python floats (`HostTree._grow_small`, `PoolTree`): each row's kept
    count (a prefix). cal, gain, before: per row, per candidate in order (rows may hold different counts); sizes:
    the rows' tree sizes; total: their summed L."""
    B, FK = len(cal), max(len(row) for row in cal)  # rows may hold different counts (`RowWeights.depth`)
    v, top = r.verify, len(r.verify) - 2
    wide = max(sizes)
    share = max((v[min(wide + 1, top + 1)] - v[min(wide, top)]) / B, 1e-12)
    value = r.spent + v[min(wide, top)]
    ok_under, widening = [[False] * FK for _ in range(B)], [[False] * FK for _ in range(B)]
    col_gain, col_cal = [0.0] * FK, [0.0] * FK
    for b in range(B):
        run = True  # every under-width candidate before (and at) j passed
        for j in range(len(cal[b])):
            c, n = cal[b][j], sizes[b] + j
            if n < wide:
                ok = c > 0 and gain[b][j] * value > (total + before[b][j]) * share and n + 1 <= r.budget
                ok_under[b][j] = ok
                run = run and ok
            elif run and c > 0 and n + 1 <= r.budget:
                widening[b][j] = True
                col_gain[n - wide] += gain[b][j]
                col_cal[n - wide] += cal[b][j]
    under = [[c if ok else 0.0 for c, ok in zip(cal[b], ok_under[b])] for b in range(B)]
    # numpy's sum, as `HostTree._keep_batch` takes it (the same float); ragged rows: flattened
    under_sum = np.array(under if all(len(row) == FK for row in cal) else sum(under, [])).sum()
    col_ok, passed, running = [], True, 0.0
    for c in range(FK):
        running += col_cal[c]
        width = min(wide + c, top)
        length = total + under_sum + running - col_cal[c]
        slope = v[min(width + 1, top + 1)] - v[width]
        passed = passed and col_gain[c] > 0 and col_gain[c] * (r.spent + v[width]) > length * max(slope, 1e-12)
        col_ok.append(passed)
    keep = []
    for b in range(B):
        count = 0
        for j in range(len(cal[b])):
            if not (ok_under[b][j] or widening[b][j] and col_ok[sizes[b] + j - wide]):
                break
            count += 1
        keep.append(count)
    return keep
