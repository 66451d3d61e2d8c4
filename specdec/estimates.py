"""What the step planner estimates from the loop's own numbers: acceptance, tree growth and costs.

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
  starts from the one above (pseudo-counts).
- `OnlineCosts`: a `CostModel` corrected by the loop's timers: c_T, the median of the last C_T_WINDOW
  plain steps in their steady state (a median, not a running mean: c_T is the unit of every decision, and
  on a shared CPU a burst of stalled steps, 40-55 ms against 12-13 at batch 8, lifted a running mean 40%
  for dozens of steps while the drafting prices, measured only when drafting, kept their level: drafting
  then looked up to 1.4x better than it was; each member is taken relative to the verify stage's level of
  its moment, and c_T carried to the current level: c_T is measured only in plain steps, a few every 64
  drafting steps while drafting pays, and a window spanning a whole run lagged the machine's speed by up
  to 50%; continuous when drafting resumes after plain steps: `OnlineCosts._observe_level`), the verify stage per width (one multiplicative correction
  per width up to FINE and per power-of-two bucket beyond, shrunk toward a common level: level and
  shape; a tree planner's widths
  differ by a few nodes, and one correction for widths 8-15 kept the profile's shape there: a batch-1 CPU
  profile flat from 2 to 16 nodes, where the loop measured 0.3 ms a node, priced a 14-node EAGLE tree
  like an 8-node one), the draft's part (one factor on catch-up + layer forwards: it
  covers the expansions, the syncs and the draft's weights running cold after the target's), a host
  supplier's query, and the rest of a drafting step (filter + commit).

Every count decays, so the estimates follow drift.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .cost import CostModel

if TYPE_CHECKING:
    from .stages import StepRecord

__all__ = ["Calibration", "DepthStats", "Estimates", "OnlineCosts", "TreeFacts", "tested_nodes"]

COST_WEIGHT = 0.15  # weight of one observation in the running cost estimates
LEVEL_WEIGHT = 0.05  # ... in the verify stage's common level, which carries c_T (a step's verify time is noisy)
DECAY = 0.98  # per drafting step, for the acceptance and growth counts (about 50 steps of memory)
PRIOR = 2.0  # pseudo-observations behind each prior
C_T_WINDOW = 31  # warm plain steps whose median is c_T (a burst of stalls shorter than half of it moves nothing)
C_T_FIRST = 3  # warm plain steps the first measurement of c_T takes (the planner's first c_T probe)
LEVEL_STALE = 8  # plain steps after which the verify level no longer dates c_T's newest members (`_observe_level`)
CLIP = 3.0  # one step's timing moves an estimate by at most this factor (a stall is not a new cost)
TABLE = 512  # widths and backlogs priced from precomputed tables (larger ones through the cost model)
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
        self.table = np.minimum(np.maximum(_isotonic(rate, self.tested + PRIOR), 0.0), 1.0)


def _isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to `values` in weighted least squares (pool adjacent violators;
    a dozen bins, so a Python loop)."""
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
        s, rate, on, run, last = 1.0, self.prior_rate, self.prior_rate, 1.0, 1.0
        for d in range(1, self.max_depth + 1):
            rate = (survived[d] + PRIOR * rate) / (at_risk[d] + PRIOR)  # depths never drafted: the one above
            rates.append(rate)
            on = (built_survived[d] + PRIOR * on) / (built_risk[d] + PRIOR)
            onward.append(on)
            s *= rate
            length.append(length[-1] + s)
            if d >= 2:
                run = (ran[d] + PRIOR * run) / (capped[d] + PRIOR)
                forwards.append(forwards[-1] + run)
            last = width_sum[d] / capped[d] if capped[d] > 1e-3 else last
            width.append(last)
        layer_width = self.layer_sum / self.layers if self.layers > 1e-3 else 1.0
        return Estimates(np.array(length), rates, onward, np.array(forwards), np.array(width), layer_width)

    def onward(self, depth: int) -> float:
        """P(a row accepts >= depth candidates | it accepted depth - 1, and the tree had depth-`depth` nodes)."""
        return self.estimates().onward[min(depth, self.max_depth)]


FINE = 16  # widths 1 .. FINE have a verify correction each; wider ones one per power of two
BUCKETS = FINE + 6  # ... the last from 512 nodes on


def _bucket(width: float | np.ndarray) -> np.ndarray:
    """The verify correction's bucket of a padded width: width - 1 up to FINE, then one per power of two."""
    w = np.maximum(np.asarray(width, dtype=np.float64), 1.0)
    wide = FINE + np.floor(np.log2(np.maximum(w, FINE) / FINE))
    return np.minimum(np.where(w <= FINE, np.floor(w) - 1, wide), BUCKETS - 1).astype(int)




class OnlineCosts:
    """A `CostModel` corrected by the loop's timers (module docstring); `online=False` keeps the profile's.

    Prices are asked several times per layer, so the corrected verify curve is tabulated per integer width
    (refreshed at the first question after an observation, made non-decreasing from width 2 on: a wider
    tree never verifies faster, whatever the buckets' corrections say) and the draft's parts likewise: a
    host float per question, or one numpy call for a vector of widths. A step that asks nothing (a
    ValuSpec gate's unscored step) does not pay the re-tabulation.
    """

    def __init__(self, model: CostModel, online: bool = True):
        self.model, self.online = model, online
        self.ar_seen = 0  # plain steps in their steady state that updated c_T
        # c_T's window: each warm plain step over the profile's c_T and over the verify level of its moment
        # (context-normalised). The profile's value is c_T until the first measurement and no member of it:
        # the profile is one moment of the machine (one taken in a stalled minute read c_T at 50 ms where
        # steps ran 9-10, and as a member it held c_T at 30 ms through 64 drafting steps)
        self._ar_window: deque[float] = deque(maxlen=C_T_WINDOW)
        self._ar_ratio = 1.0  # the window's median
        self._since_level = 0  # plain steps since the verify level last moved
        self._anchoring = False  # the level is learned afresh after plain steps and dates c_T meanwhile
        self.verify_level, self.verify_ratio, self.verify_seen = 1.0, np.ones(BUCKETS), np.zeros(BUCKETS)
        self.level_seen = 0  # steady drafting steps behind the level (at most 1 / LEVEL_WEIGHT counted)
        self.query, self.rest = 0.0, model.loop
        # The draft's part of a step, propose ~ a * catch_up(m) + b * sum of layer(w): decayed normal equations
        # of that least-squares fit, with PRIOR pseudo-steps at a = b = 1 (the profile as measured).
        self._gram, self._moment = (PRIOR, 0.0, PRIOR), (PRIOR, PRIOR)  # (g00, g01, g11), (r0, r1)
        self.catch_factor, self.layer_factor = 1.0, 1.0
        self._n = np.arange(TABLE, dtype=np.float64)
        self._base = np.concatenate([[0.0], model.verify_seconds(self._n[1:])])  # at the profiled context
        self._base_list = self._base.tolist()
        self._buckets = np.concatenate([[0], _bucket(self._n[1:])])
        self._bucket_list = self._buckets.tolist()
        drafts = model.draft_layer is not None
        self._layer = [0.0] + model.draft_seconds(self._n[1:]).tolist() if drafts else []
        self._catch = [0.0] + model.catch_up_seconds(self._n[1:]).tolist() if drafts else []
        self._refresh()

    def _current(self) -> None:
        if self._stale:
            self._refresh()

    def _refresh(self) -> None:
        """Re-tabulate the corrected verify curve: per width bucket, its measured correction shrunk toward
        the common level (PRIOR pseudo-steps); a bucket never measured takes its measured neighbours'
        (interpolated; beyond them the nearest), so a correction of the widths a planner uses is not undone
        by the common level on the widths it skips (the curve is made non-decreasing afterwards)."""
        seen = self.verify_seen
        ratio = (seen * self.verify_ratio + PRIOR * self.verify_level) / (seen + PRIOR)
        known = np.flatnonzero(seen > 0)
        if known.size:
            ratio = np.where(seen > 0, ratio, np.interp(np.arange(len(ratio)), known, ratio[known]))
        table = ratio[self._buckets] * self._base
        table[2:] = np.maximum.accumulate(table[2:])
        self._table, self._table_list, self._stale = table, table.tolist(), False

    def profiled(self, width: float) -> float:
        """The cost model's verify stage at a padded `width` as profiled (no correction; profiled context); a
        fractional width (a mean) between two tabulated ones is interpolated."""
        if 1 <= width < TABLE - 1:
            low = int(width)
            base = self._base_list[low]
            return base if low == width else base + (width - low) * (self._base_list[low + 1] - base)
        return float(self.model.verify_seconds(width))

    def profiled_draft(self, width: float) -> float:
        """The cost model's draft forward over `width` nodes per row as profiled (no correction)."""
        if isinstance(width, int) and 0 < width < TABLE and self._layer:
            return self._layer[width]
        return float(self.model.draft_seconds(width))

    def verify(self, width: float | np.ndarray, context: float | None = None) -> float | np.ndarray:
        """The verify stage at a padded `width` (an int, or an array of possibly fractional means) and
        `context` tokens, corrected."""
        self._current()
        factor = self.model.context_factor(context)
        if isinstance(width, int) and 0 < width < TABLE:
            return self._table_list[width] * factor
        return np.interp(width, self._n, self._table) * factor

    def verify_array(self, context: float | None) -> np.ndarray:
        """[TABLE] float64: the corrected verify stage by padded width (index = width, 0 unused)."""
        self._current()
        return self._table * self.model.context_factor(context)

    def verify_scale(self, width: int, context: float | None) -> float:
        """What multiplies the fitted verify curve at `width`: its correction and the context's factor."""
        self._current()
        width = min(width, TABLE - 1)
        return self._table_list[width] / self._base[width] * self.model.context_factor(context)

    def layer(self, width: float) -> float:
        """One draft layer forward of `width` nodes per row (a mean may be fractional), its expansion and
        sync included."""
        exact = isinstance(width, int) and 0 < width < TABLE
        base = self._layer[width] if exact else float(self.model.draft_seconds(width))
        return self.layer_factor * base

    def catch_up(self, backlog: int) -> float:
        m = max(int(backlog), 1)
        return self.catch_factor * (self._catch[m] if m < TABLE else float(self.model.catch_up_seconds(m)))

    def draft(self, backlog: int, forwards: float, layer_width: float) -> float:
        """The draft's part of a step: catch-up and layer forwards (expansions and syncs in the factor)."""
        return self.catch_up(backlog) + forwards * self.layer(layer_width)

    @property
    def ar_step(self) -> float:
        """c_T at the profiled context: the profile's until the first measurement, then the window's median
        ratio carried to the verify stage's current level. c_T is measured only in plain steps (a few every
        C_T_EVERY drafting steps while drafting pays), the verify stage in every drafting step: the level
        carries a change of the machine's speed between c_T's measurements (on the 2-core CPU steps sped
        up from 9 to 6 ms within a run while a window of plain steps spanning it held c_T at 9)."""
        if not self._ar_window:
            return self.model.ar_step
        return self.model.ar_step * self._ar_ratio * self.verify_level

    def ar(self, context: float | None) -> float:
        """c_T at `context` tokens: the estimate (held at the profiled context length) scaled like a
        one-node verification (`CostModel.context_factor`): an AR step at a shorter context is cheaper, and
        pricing it at the profiled length made drafting look better than it was at short contexts."""
        return self.ar_step * self.model.context_factor(context)

    def observe_ar(self, step: StepRecord, context: float | None, warm: bool) -> None:
        """A plain step; `warm`: the two steps before it were plain too. Only those update c_T: the first
        plain steps after drafting run 4-50% slower on the demo pair on this CPU (the target's weights are
        cold after the draft's forwards), while c_T stands for plain decoding in its steady state, as an AR
        baseline runs. c_T is the median of the window (module docstring): the planner's first c_T probe
        measures C_T_FIRST warm steps (their median rejects one stall), and a stall is then one outlier among
        up to C_T_WINDOW. Each member is relative to the verify level of its moment (`ar_step`)."""
        self._since_level += 1
        if warm and self.online:  # the one-node verification is priced by c_T: no correction table to refresh
            unit = self.model.ar_step * self.verify_level * self.model.context_factor(context)
            self._ar_window.append(step.seconds / unit)
            self._ar_ratio = statistics.median(self._ar_window)
            self.ar_seen += 1

    def observe_draft(self, step: StepRecord, facts: TreeFacts, context: float | None, host: bool,
                      steady: bool = True) -> None:
        """A drafting step; `steady`: not the first after plain steps or of a call (`observe_verify`)."""
        if host:
            self.query = self._ema(self.query, step.propose) if self.query > 0 else step.propose
        elif self.online:
            self._fit_draft(step.propose, facts)
        self.rest = self._ema(self.rest, step.filter + step.commit)
        self.observe_verify(step, context, steady)

    def _fit_draft(self, seconds: float, facts: TreeFacts) -> None:
        """Refit the draft's two factors on this step's propose time: the catch-up's (it runs right after the
        target's forward, with the draft's weights cold, and carries the step's fixed work: planning, the
        first expansion) and the layers' (each with its expansion and sync). Both are re-solved from every
        step seen, weighted by recency, so the level and the split between them follow what is measured."""
        m = max(int(facts.backlog), 1)
        catch = self._catch[m] if m < TABLE else float(self.model.catch_up_seconds(m))
        layers = sum(self._layer[w] if w < TABLE else float(self.model.draft_seconds(w)) for w in facts.layer_widths)
        x1 = layers / catch  # in units of the catch-up: the equations stay well conditioned
        y = min(seconds, CLIP * (self.catch_factor * catch + self.layer_factor * layers)) / catch
        g, r, keep, prior = self._gram, self._moment, DECAY, (1 - DECAY) * PRIOR
        g00, g01, g11 = keep * g[0] + 1.0 + prior, keep * g[1] + x1, keep * g[2] + x1 * x1 + prior
        r0, r1 = keep * r[0] + y + prior, keep * r[1] + x1 * y + prior
        self._gram, self._moment = (g00, g01, g11), (r0, r1)
        det = g00 * g11 - g01 * g01
        self.catch_factor = max((r0 * g11 - r1 * g01) / det, 0.1)
        self.layer_factor = max((r1 * g00 - r0 * g01) / det, 0.1)

    def seed(self, other: "OnlineCosts") -> None:
        """Start from `other`'s corrections (another batch size's): c_T and the rest of a step scaled by what
        `other` measured over its profile, the verify level and the draft's factors as they are. The machine's
        state (its speed today, the draft's weights running cold) reaches every batch size alike; the
        per-width verify corrections are the profile's shape at `other`'s batch and are not carried over."""
        if not self.online:
            return
        self.ar_seen = min(other.ar_seen, 1)
        # a member, measured: the next measurement counts as its mean with it, two outvote it
        self._ar_window = deque([other._ar_ratio] if other._ar_window else [], maxlen=C_T_WINDOW)
        self._ar_ratio, self._since_level, self._anchoring = other._ar_ratio, other._since_level, other._anchoring
        self.rest = self.model.loop * other.rest / other.model.loop if other.model.loop > 0 else other.rest
        self.verify_level, self.level_seen = other.verify_level, other.level_seen
        self._gram, self._moment = other._gram, other._moment
        self.catch_factor, self.layer_factor = other.catch_factor, other.layer_factor
        self._stale = True

    def observe_verify(self, step: StepRecord, context: float | None, steady: bool = True) -> None:
        """Correct the verify curve at this step's padded width: its bucket, and, from a `steady` step, the
        common level. The first drafting step after plain steps verifies slower (the target's weights cold
        after the draft's long catch-up); it corrects its bucket but not the level, which carries c_T
        (`ar_step`): while plain decoding pays the only drafting steps are such probes, and each one lifted
        c_T and with it every drafting plan."""
        if not self.online:
            return
        w = step.width
        ratio = step.verify / (self.profiled(w) * self.model.context_factor(context))
        b = self._bucket_list[w] if w < TABLE else int(_bucket(w))
        if steady:
            self._observe_level(ratio)
        self.verify_ratio[b] = self._ema(self.verify_ratio[b], ratio) if self.verify_seen[b] else ratio
        self.verify_seen[b] = min(self.verify_seen[b] + 1, 1 / COST_WEIGHT)
        self._stale = True

    def _observe_level(self, ratio: float) -> None:
        """The level is the (geometric) mean of its observations until the running mean's memory is filled:
        c_T, measured against it from the planner's ninth step on, must not see the profile's 1 fade out.

        c_T's members are dated by the level of their moment only while drafting measures it: plain steps
        taken more than LEVEL_STALE steps after it last moved (plain decoding paying, or before any drafting
        step) are as fresh as any estimate, while the level is not (the profile's, or an old drafting
        stretch's). The level is then learned afresh from the next drafting steps (a mean, as at the start)
        and taken as theirs until learned, so c_T is continuous when drafting resumes: verification inside
        drafting steps runs slower than profiled (at batch 16 on the 2-core CPU, 1.2-1.35x, the target's
        weights cold after the head's forwards), and carried over from the profile's level that lifted c_T
        by 32% and with it every drafting plan (a call drafted at 0.76x AR)."""
        old_level = self.verify_level
        if self._ar_window and (self.level_seen == 0 or self._since_level > LEVEL_STALE):
            self.level_seen, self._anchoring = 0, True  # a new drafting stretch: its level learned afresh
        self.level_seen = min(self.level_seen + 1, 1 / LEVEL_WEIGHT)
        if self.level_seen < 1 / LEVEL_WEIGHT:
            old = self.verify_level
            new = min(max(ratio, old / CLIP), old * CLIP) if self.level_seen > 1 else ratio
            self.verify_level = math.exp(math.log(old) + (math.log(new) - math.log(old)) / self.level_seen)
        else:
            self.verify_level = self._ema(self.verify_level, ratio, LEVEL_WEIGHT)
        if self._anchoring:  # until it is learned, the new level dates c_T's members: c_T stays as measured
            keep = old_level / self.verify_level
            self._ar_window = deque((q * keep for q in self._ar_window), maxlen=C_T_WINDOW)
            self._ar_ratio *= keep
            self._anchoring = self.level_seen < 1 / LEVEL_WEIGHT
        self._since_level = 0

    def _ema(self, old: float, new: float, weight: float = COST_WEIGHT) -> float:
        if not self.online:
            return old
        old = max(old, 1e-6)  # a part the profile measured as nothing (the loop next to a forward) still ticks
        new = min(max(new, old / CLIP), old * CLIP)
        return math.exp((1 - weight) * math.log(old) + weight * math.log(new))


