"""What the step planner estimates from the loop's own numbers: acceptance and tree growth.

- `Calibration`: how often the target accepts a tree node whose parent it accepted, as a function of the
  node's conditional probability under the drafter (its probability given its parent: the draft's
  log-softmax value, or a retrieved prefix's share of its parent's matches). A reliability table over
  probability bins, fitted non-decreasing (pool-adjacent-violators), learned from the nodes each
  verification tested: the children of the accepted nodes, accepted or not. A node's calibrated path
  probability is the product over its path; L(T) = 1 + their sum. (On the demo pair the draft is
  underconfident: its top token, at p ~0.45, is the target's ~85% of the time; per-depth ratios of
  accepted to predicted length compound that along paths, 1.8 at depth 1 and 4 at depth 2, and then
  over-value a deep tree's tail: the table calibrates each edge instead.)
- `DepthStats`: by depth d, S(d) = P(a row accepts >= d candidates) over the steps whose cap was >= d
  (the tree a cap D builds is the cap-D' tree cut at depth D, so a row that accepted a of them accepts
  min(a, D)): L(D) = 1 + sum_{d <= D} S(d); the same rate where depth-d nodes existed (what forwarding a
  layer yields); how often the forward of depth d ran and the tree's padded width. A depth never drafted
  starts from the one above (pseudo-counts); so does the chance its forward runs, times the last measured
  ratio of one depth's to the one above's (a layer runs only after the one above it did).
- The costs (`OnlineCosts`) are in `specdec.online_costs`.

Every count decays, so the estimates follow drift.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Calibration", "DepthStats", "Estimates", "TreeFacts", "isotonic", "tested_nodes"]

DECAY = 0.98  # per drafting step, for the acceptance and growth counts (about 50 steps of memory)
PRIOR = 2.0  # pseudo-observations behind each prior
EDGES = np.array([0.0, 0.01, 0.03, 0.06, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])


@dataclass(frozen=True)
class TreeFacts:
    """What a drafting step did, from numbers the supplier synced anyway.

    cap: the plan's depth cap; forwards: draft layer forwards run (the catch-up excluded), of
    ``layer_widths`` nodes per row; width_after[d - 1]: the padded tree width after depth d's nodes joined
    (one entry per depth the tree reached, the last is the final width); backlog: the catch-up's length
    (0 for suppliers without a draft model); row_depth: [B] each row's own tree depth, when known.
    """

    cap: int
    forwards: int
    layer_widths: tuple[int, ...]
    width_after: tuple[int, ...]
    backlog: int = 0
    row_depth: np.ndarray | None = None


class Calibration:
    """P(the target accepts a node | it accepted the node's parent) by the node's conditional probability
    p under the drafter (module docstring); prior: p itself, worth PRIOR nodes per bin."""

    def __init__(self):
        self.tested = np.zeros(len(EDGES) - 1)
        self.accepted = np.zeros(len(EDGES) - 1)
        self.centers = (EDGES[:-1] + EDGES[1:]) / 2
        self.table = self.centers.copy()

    def _bins(self, p: np.ndarray) -> np.ndarray:
        """Each probability's bin (1.0 in the last); ufuncs, not np.clip's slower wrapper: asked every layer."""
        return np.minimum(np.maximum(np.searchsorted(EDGES, p, side="right") - 1, 0), len(self.table) - 1)

    def __call__(self, p: np.ndarray) -> np.ndarray:
        """The calibrated acceptance of nodes with conditional probabilities p (any shape, in [0, 1])."""
        return self.table[self._bins(p)]

    def observe(self, p: np.ndarray, accepted: np.ndarray) -> None:
        """Nodes the target tested: their conditional probabilities and whether it accepted them."""
        if p.size == 0:
            return
        b = self._bins(p)
        self.tested = DECAY * self.tested + np.bincount(b, minlength=len(self.table))
        self.accepted = DECAY * self.accepted + np.bincount(b, weights=accepted.astype(np.float64),
                                                            minlength=len(self.table))
        rate = (self.accepted + PRIOR * self.centers) / (self.tested + PRIOR)
        self.table = np.minimum(np.maximum(isotonic(rate, self.tested + PRIOR), 0.0), 1.0)


def isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to `values` in weighted least squares (pool adjacent violators;
    a dozen or so values: the calibration's bins, the verify curve's per-width corrections; a Python loop)."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for v, w in zip(values.tolist(), weights.tolist()):
        blocks.append([v, w, 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, n2 = blocks.pop()
            v1, w1, n1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    return np.array([mean for mean, _, n in blocks for _ in range(n)])


def tested_nodes(tokens: np.ndarray, parents: np.ndarray, num_nodes: np.ndarray, accepted: np.ndarray,
                 num_accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which nodes of a host-side tree the target tested and which it accepted, from the tokens it accepted.

    tokens, parents: [B, T] (node 0 the root); num_nodes: [B]; accepted: [B, A] the accepted tokens (then the
    bonus); num_accepted: [B]. The accepted path is found by its tokens (a filter between supplier and
    verifier may renumber nodes); tested nodes are the children of the accepted ones, root included.
    Returns (tested, accepted) [B, T] bool.
    """
    if tokens.shape[0] == 1:
        return _tested_one(tokens, parents, num_nodes, accepted, num_accepted)
    return _tested_rows(tokens, parents, num_nodes, accepted, num_accepted)


def _tested_one(tokens: np.ndarray, parents: np.ndarray, num_nodes: np.ndarray, accepted: np.ndarray,
                num_accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`tested_nodes` for one row, walked in Python: per accepted depth the numpy version's ~8 calls on the
    whole tree (~80 us a step with the EAGLE head's 5-token paths) for a scan of a few dozen nodes."""
    T, n = tokens.shape[1], int(num_nodes[0])
    toks, pars = tokens[0, :n].tolist(), parents[0, :n].tolist()
    on = [True] + [False] * (n - 1)  # on the accepted path
    node = 0
    for tok in accepted[0, :int(num_accepted[0])].tolist():
        node = next((i for i in range(1, n) if pars[i] == node and toks[i] == tok), node)
        on[node] = True
    tested, on_path = np.zeros((2, 1, T), dtype=bool)
    tested[0, :n] = [p >= 0 and on[p] for p in pars]
    on_path[0, :n] = on
    return tested, on_path & tested


def _tested_rows(tokens: np.ndarray, parents: np.ndarray, num_nodes: np.ndarray, accepted: np.ndarray,
                 num_accepted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`tested_nodes` for any number of rows, in numpy."""
    B, T = tokens.shape
    rows = np.arange(B)
    real = np.arange(T)[None, :] < num_nodes[:, None]
    on_path = np.zeros((B, T), dtype=bool)
    on_path[:, 0] = True
    node = np.zeros(B, dtype=np.int64)
    for d in range(int(num_accepted.max(initial=0))):
        going = d < num_accepted
        match = real & (parents == node[:, None]) & (tokens == accepted[:, d:d + 1]) & going[:, None]
        node = np.where(match.any(1), match.argmax(1), node)
        on_path[rows[going], node[going]] = True
    tested = real & on_path[rows[:, None], np.maximum(parents, 0)] & (parents >= 0)
    return tested, on_path & tested

@dataclass(frozen=True)
class Estimates:
    """`DepthStats`' estimates, indexed by depth D = 0 .. max_depth.

    length: L(D), tokens per row with cap D, bonus included; rate[d]: P(a row accepts >= d | >= d - 1),
    with a cap >= d (what the planner's L(D) is made of); onward[d]: the same where the tree had depth-d
    nodes (what forwarding a layer of them yields); forwards: expected layer forwards with cap D; width: the padded tree width with cap D; layer_width: the
    mean width of a layer forward.
    """

    length: np.ndarray
    rate: list[float]
    onward: list[float]
    forwards: np.ndarray
    width: np.ndarray
    layer_width: float


# Rows of DepthStats.table, each indexed by depth d = 1 .. max_depth (column 0 unused).
AT_RISK, SURVIVED, CAPPED, RAN, WIDTH, BUILT_RISK, BUILT_SURVIVED = range(7)


class DepthStats:
    """Acceptance and tree growth by depth, from the steps that drafted (module docstring).

    table[AT_RISK, d]: rows with a cap >= d that accepted >= d - 1 candidates; SURVIVED: of them, >= d;
    CAPPED: steps with a cap >= d; RAN: of them, steps that ran depth d's layer forward; WIDTH: their summed tree widths
    after depth d; BUILT_RISK, BUILT_SURVIVED: AT_RISK and SURVIVED counted only where the tree had depth-d
    nodes. All decay by DECAY per drafting step.
    """

    def __init__(self, max_depth: int, prior_rate: float = 0.5):
        self.max_depth, self.prior_rate = max_depth, prior_rate
        self.table = np.zeros((7, max_depth + 1))
        self.layer_sum, self.layers, self.steps = 0.0, 0.0, 0
        self._cache: Estimates | None = None

    def record(self, facts: TreeFacts, accepted: np.ndarray, row_depth: np.ndarray | None = None) -> None:
        """One drafting step: its facts, each active row's accepted candidates (bonus excluded) and, when
        the supplier knows them, those rows' own tree depths (else the batch's for every row)."""
        t, cap, grown = self.table, min(facts.cap, self.max_depth), min(len(facts.width_after), self.max_depth)
        t *= DECAY
        self.layer_sum, self.layers, self.steps = self.layer_sum * DECAY, self.layers * DECAY, self.steps + 1
        depth = np.arange(cap + 1)[None, :]
        a = np.minimum(accepted, cap)[:, None]
        ge = np.cumsum(np.bincount(a[:, 0], minlength=cap + 1)[::-1])[::-1]  # [d]: rows with a >= d
        t[AT_RISK, 1:cap + 1] += ge[:cap]
        t[SURVIVED, 1:cap + 1] += ge[1:cap + 1]
        built = (np.full(len(accepted), grown) if row_depth is None else np.minimum(row_depth, cap))[:, None]
        t[BUILT_RISK, 1:cap + 1] += ((a >= depth - 1) & (depth <= built))[:, 1:].sum(0)
        t[BUILT_SURVIVED, 1:cap + 1] += ((a >= depth) & (depth <= built))[:, 1:].sum(0)
        t[CAPPED, 1:cap + 1] += 1
        t[RAN, 2:2 + facts.forwards] += 1
        widths = facts.width_after or (1,)
        t[WIDTH, 1:cap + 1] += [widths[min(d, len(widths)) - 1] for d in range(1, cap + 1)]
        self.layer_sum += sum(facts.layer_widths)
        self.layers += len(facts.layer_widths)
        self._cache = None

    def estimates(self) -> Estimates:
        """The current estimates (cached until the next `record`: the planner asks several times a step)."""
        if self._cache is None:
            self._cache = self._estimate()
        return self._cache

    def _estimate(self) -> Estimates:
        at_risk, survived, capped, ran, width_sum, built_risk, built_survived = (row.tolist() for row in self.table)
        length, rates, onward, forwards, width = [1.0], [1.0], [1.0], [0.0, 0.0], [1.0]
        s, rate, on, run, ratio, last = 1.0, self.prior_rate, self.prior_rate, 1.0, 1.0, 1.0
        for d in range(1, self.max_depth + 1):
            rate = (survived[d] + PRIOR * rate) / (at_risk[d] + PRIOR)  # depths never drafted: the one above
            rates.append(rate)
            on = (built_survived[d] + PRIOR * on) / (built_risk[d] + PRIOR)
            onward.append(on)
            s *= rate
            length.append(length[-1] + s)
            if d >= 2:
                # Depth d's forward runs only after depth d - 1's: a depth drafted rarely starts from the one
                # above times the last ratio between depths, not from the one above. Carried flat, the
                # forwards of caps deeper than any drafted lately grew by one a depth while the trees had
                # stopped: on the demo pair at HumanEval batch 1 a planner drafting at caps 1-3 priced the
                # cap-12 tree at 44 ms where it ran in 29 (bench/results/2026-12-06-cpu-smart-probes/)
                below = run
                run = (ran[d] + PRIOR * run * ratio) / (capped[d] + PRIOR)
                ratio = min(run / below, 1.0) if below > 0 else ratio
                forwards.append(forwards[-1] + run)
            last = width_sum[d] / capped[d] if capped[d] > 1e-3 else last
            width.append(last)
        layer_width = self.layer_sum / self.layers if self.layers > 1e-3 else 1.0
        return Estimates(np.array(length), rates, onward, np.array(forwards), np.array(width), layer_width)

    def onward(self, depth: int) -> float:
        """P(a row accepts >= depth candidates | it accepted depth - 1, and the tree had depth-`depth` nodes)."""
        return self.estimates().onward[min(depth, self.max_depth)]
