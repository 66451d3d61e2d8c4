"""The step cost model corrected by the loop's own timers (`OnlineCosts`), for the step planner and
ValuSpec's gate; acceptance and tree growth are estimated in `specdec.estimates`.

`OnlineCosts`: a `CostModel` corrected by the loop's timers:
- c_T, the median of the last C_T_WINDOW plain steps in their steady state. A median, not a running mean:
  c_T is the unit of every decision, and on a shared CPU a burst of stalled steps (40-55 ms against 12-13
  at batch 8) lifted a running mean 40% for dozens of steps while the drafting prices, measured only when
  drafting, kept their level: drafting then looked up to 1.4x better than it was. c_T is measured only in
  plain steps (a few every 64 drafting steps while drafting pays) and only from them: a c_T probe's few
  plain steps, or a call's first ones, that disagree with it by over C_T_RESET restart the window
  (`OnlineCosts.measure_ar`), so a window spanning a run does not lag the machine's speed, and calls differ
  in speed beyond what the context scaling says. It is not carried by the drafting steps' verify level
  (`OnlineCosts.ar_step`: that level moved with the trees' widths, not with plain steps). While drafting,
  c_T is also bounded by what the stretch's last steady steps spent verifying.
- The verify stage per width: one multiplicative correction per width up to FINE and per power-of-two
  bucket beyond, shrunk toward a common level (level and shape). A tree planner's widths differ by a few
  nodes, and one correction for widths 8-15 kept the profile's shape there: a batch-1 CPU profile flat
  from 2 to 16 nodes, where the loop measured 0.3 ms a node, priced a 14-node EAGLE tree like an 8-node one.
- The draft's part: one factor on catch-up + layer forwards (it covers the expansions, the syncs and the
  draft's weights running cold after the target's).
- A host supplier's query, and the rest of a drafting step (filter + commit).

"""

from __future__ import annotations

import math
import statistics
from collections import deque
from typing import TYPE_CHECKING

import numpy as np

from .cost import CostModel
from .estimates import DECAY, PRIOR, isotonic

if TYPE_CHECKING:
    from .estimates import TreeFacts
    from .stages import StepRecord

__all__ = ["OnlineCosts", "C_T_WINDOW", "C_T_FIRST", "C_T_RESET", "C_T_AGREE"]

COST_WEIGHT = 0.15  # weight of one observation in the running cost estimates
LEVEL_WEIGHT = 0.05  # ... in the verify stage's common level (a step's verify time is noisy)
C_T_WINDOW = 31  # warm plain steps whose median is c_T (a burst of stalls shorter than half of it moves nothing)
C_T_FIRST = 3  # warm plain steps one measurement of c_T takes (each c_T probe of the planner)
C_T_RESET = 0.2  # a measurement whose median is further than this from c_T replaces the window (`measure_ar`)
C_T_AGREE = 0.05  # ... one within this of it agrees (`c_t_agreed`: the planner then re-measures less often)
LEVEL_STALE = 8  # plain steps after which the verify level is learned afresh by the next drafting steps
BOUND_STEPS = 3  # steady drafting steps, newer than c_T's newest member, whose median verify bounds c_T
CLIP = 3.0  # one step's timing moves an estimate by at most this factor (a stall is not a new cost)
TABLE = 512  # widths and backlogs priced from precomputed tables (larger ones through the cost model)
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
    (refreshed at the first question after an observation, made non-decreasing from width 2 on by a
    weighted monotone fit, `_refresh`: a wider tree never verifies faster, whatever the buckets' corrections
    say) and the draft's parts likewise: a
    host float per question, or one numpy call for a vector of widths. A step that asks nothing (a
    ValuSpec gate's unscored step) does not pay the re-tabulation.
    """

    def __init__(self, model: CostModel, online: bool = True):
        self.model, self.online = model, online
        self.ar_seen = 0  # plain steps in their steady state that updated c_T
        self.c_t_agreed = 0  # measurements in a row (`measure_ar`) that found c_T within C_T_AGREE of itself
        # c_T's window: each warm plain step over the profile's c_T (context-normalised). The profile's value
        # is c_T until the first measurement and no member of it: the profile is one moment of the machine
        # (one taken in a stalled minute read c_T at 50 ms where steps ran 9-10, and as a member it held c_T
        # at 30 ms through 64 drafting steps)
        self._ar_window: deque[float] = deque(maxlen=C_T_WINDOW)
        self._ar_ratio = 1.0  # the window's median
        # a measurement of c_T (`measure_ar`): its size, c_T's ratio at its first reading (None: there was no
        # c_T yet) and its readings (None until the first)
        self._measuring: tuple[int, float | None, list[float] | None] | None = None
        self._since_level = 0  # plain steps since the verify level last moved
        self.verify_level, self.verify_ratio, self.verify_seen = 1.0, np.ones(BUCKETS), np.zeros(BUCKETS)
        self.level_seen = 0  # steady drafting steps behind the level (at most 1 / LEVEL_WEIGHT counted)
        self.query, self.rest = 0.0, model.loop
        # c_T's bound while drafting (`ar_step`): the verify stage of the steady drafting steps since the last
        # warm plain step (context-normalised), and a plain step's own work outside verification
        self._drafted_verify: deque[float] = deque(maxlen=BOUND_STEPS)
        self.plain_rest = model.loop
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
        # Non-decreasing from width 2 on: over the widths with a bucket each, the weighted least-squares
        # monotone fit (a bucket's weight: its readings and the PRIOR that shrinks it), not the running
        # maximum, which lifted every wider width to one width's slow reading and so priced every larger
        # tree up, never down: drafting steps over-priced by 5-25% at HumanEval batch 4 on the 2-core CPU
        # (bench/results/2026-12-04-cpu-call-parity/). Past FINE, buckets span many widths: the maximum.
        table[2:FINE + 1] = isotonic(table[2:FINE + 1], seen[1:FINE] + PRIOR)
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
        """c_T at the profiled context: the profile's until the first measurement, then the window's median.

        Plain steps alone measure it. Carried by the verify stage's level between measurements (up to 434f636: the
        level learned from drafting steps, a change of the machine's speed reaching both), c_T rose with the
        drafting steps' widths: the level is their verify time over the profile's, one factor for every width, and
        it climbed as trees grew deeper within a stretch. On the demo pair at HumanEval batch 1 (EAGLE-3 + SMART,
        Xeon 2-core CPU) it read c_T at a median 4.85 ms across drafting stretches while the plain steps between
        them took 4.05 (in another trace 2.99 against 3.09); measured from plain steps alone, c_T read 3.28 ms
        against their 3.28 (bench/results/2026-12-07-cpu-c-t-plain/). A change of the machine's speed between
        measurements is caught by the next c_T probe's restart (`measure_ar`) or, while it speeds up, by the bound
        below."""
        c_t = self.model.ar_step * self._ar_ratio if self._ar_window else self.model.ar_step
        if len(self._drafted_verify) == BOUND_STEPS:
            # A plain step verifies one node where these steps verified one or more: it cannot cost more than
            # their verify stage and its own work. Measured in a slow stretch, c_T lagged a machine that sped up as
            # drafting resumed (Spec-Bench batch 4 on the 2-core CPU: plain steps at 25-29 ms, then drafting
            # steps verifying 2-3 nodes in 21-24 ms, c_T held at 27 ms for 30 steps and depth-1 trees drafted
            # at 0.87x AR by the rows' mean tokens on plans that read 1.15-1.3x:
            # bench/results/2026-12-06-cpu-smart-spread/). The next warm plain step ends the bound.
            c_t = min(c_t, statistics.median(self._drafted_verify) + self.plain_rest)
        return c_t

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
        up to C_T_WINDOW. Each member is the step over the profile's c_T at its context."""
        self._since_level += 1
        if self.online:
            self.plain_rest = self._ema(self.plain_rest, step.propose + step.filter + step.commit) \
                if self.plain_rest > 0 else step.propose + step.filter + step.commit
        if warm and self.online:  # the one-node verification is priced by c_T: no correction table to refresh
            self._drafted_verify.clear()  # c_T measured afresh: the drafting steps' bound is older
            unit = self.model.ar_step * self.model.context_factor(context)
            reading = step.seconds / unit
            if self._measuring is not None and self._measuring[2] is None:  # c_T as the measurement found it
                self._measuring = (self._measuring[0], self._ar_ratio if self._ar_window else None, [])
            self._ar_window.append(reading)
            self._ar_ratio = statistics.median(self._ar_window)
            self.ar_seen += 1
            if self._measuring is not None:
                count, reference, readings = self._measuring
                readings.append(reading)
                if len(readings) >= count:
                    self._measuring = None
                    fresh = statistics.median(readings)
                    if reference is not None:
                        shift = abs(math.log(fresh / reference))
                        self.c_t_agreed = self.c_t_agreed + 1 if shift <= math.log1p(C_T_AGREE) else 0
                        if shift > math.log1p(C_T_RESET):
                            self._ar_window = deque(readings, maxlen=C_T_WINDOW)
                            self._ar_ratio = fresh

    @property
    def measuring(self) -> bool:
        """A measurement of c_T (`measure_ar`) is under way: its warm plain steps have not all run yet (never
        with frozen costs, which measure nothing)."""
        return self.online and self._measuring is not None

    def measure_ar(self, count: int = C_T_FIRST) -> None:
        """The next `count` warm plain steps are one measurement of c_T (a planner's c_T probe while drafting
        pays, and the first plain steps of each call). Their readings join the window like any plain step's;
        if their median is further than C_T_RESET from c_T as it stood, the window restarts from them. On the
        2-core CPU at Spec-Bench batch 4 a stretch resumed after plain steps at 30 ms, the machine then ran
        them at 18, and a probe's one warm step at 18 ms moved a median of 31 members not at all: c_T stayed
        at 30 ms and drafting, priced at 1.6x a plain step, ran 0.78-0.96x AR over whole calls
        (bench/results/2026-12-05-cpu-smart-e53d847/)."""
        self._measuring = (max(int(count), 1), None, None)

    def observe_draft(self, step: StepRecord, facts: TreeFacts, context: float | None, host: bool,
                      steady: bool = True) -> None:
        """A drafting step; `steady`: not the first after plain steps or of a call (`observe_verify`). Only steady
        steps refit the draft's factors: a resume's propose holds a long catch-up run with the draft's weights
        cold after plain steps (8-22 ms against 2-4 priced at Spec-Bench batch 4 on the 2-core CPU), and a
        planner that was mostly plain learned its factors from little else, pricing steady cap-5 steps at
        21 ms where they ran in 15 and staying plain (bench/results/2026-12-07-cpu-head-window/)."""
        if host:
            self.query = self._ema(self.query, step.propose) if self.query > 0 else step.propose
        elif self.online and steady:  # a resume's catch-up is the catch-up's, its weights cold (`_fit_draft`)
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
        # Not measured at this batch size yet (ar_seen 0): the planner's first c_T probe comes after WARMUP
        # drafting steps, as a fresh planner's does, not after C_T_EVERY. The ratio carried over is other's,
        # over other's profile; a supplier that drafts every step would otherwise price a new batch size by it
        # for 64 drafting steps, and a fresh planner's profile c_T was 20% off on the Xeon 2-core CPU (the demo
        # pair at HumanEval batch 4: 4.6 ms, 5.5 measured; bench/results/2026-12-07-cpu-eagle-smart-b1/).
        self.ar_seen = self.c_t_agreed = 0
        # a member, measured: the next measurement counts as its mean with it, two outvote it
        self._ar_window = deque([other._ar_ratio] if other._ar_window else [], maxlen=C_T_WINDOW)
        self._ar_ratio, self._since_level = other._ar_ratio, other._since_level
        self._measuring = None
        self.rest = self.model.loop * other.rest / other.model.loop if other.model.loop > 0 else other.rest
        self.verify_level, self.level_seen = other.verify_level, other.level_seen
        self._gram, self._moment = other._gram, other._moment
        self.catch_factor, self.layer_factor = other.catch_factor, other.layer_factor
        self._stale = True

    def observe_verify(self, step: StepRecord, context: float | None, steady: bool = True) -> None:
        """Correct the verify curve at this step's padded width: its bucket, and, from a `steady` step, the
        common level. The first drafting step after plain steps verifies slower (the target's weights cold
        after the draft's long catch-up); it corrects its bucket but not the level, which prices every width
        not measured yet: while plain decoding pays the only drafting steps are such probes."""
        if not self.online:
            return
        w = step.width
        ratio = step.verify / (self.profiled(w) * self.model.context_factor(context))
        b = self._bucket_list[w] if w < TABLE else int(_bucket(w))
        if self.verify_seen[b]:
            self.verify_ratio[b] = self._ema(self.verify_ratio[b], ratio)
        else:  # a bucket's first reading, within CLIP of the level before it (`_observe_level`)
            self.verify_ratio[b] = min(max(ratio, self.verify_level / CLIP), self.verify_level * CLIP)
        if steady:
            self._observe_level(ratio)
            self._drafted_verify.append(step.verify / self.model.context_factor(context))
        self.verify_seen[b] = min(self.verify_seen[b] + 1, 1 / COST_WEIGHT)
        self._stale = True

    def _observe_level(self, ratio: float) -> None:
        """The level is the (geometric) mean of its observations until the running mean's memory is filled (a fresh
        planner's prices must not see the profile's 1 fade out). Every reading is within CLIP of the level before
        it, the first too: on a GPU the first tree of each new shape class compiles Triton kernels (one step of 1.1
        s among steps of 5 ms on the H200), and taken whole as a first reading, one such step priced every drafting
        plan at 70x a plain step for the rest of the run (bench/results/2026-12-04-h200-planner-trace/); a bucket's
        first reading is held within CLIP of the level likewise (`observe_verify`).

        After more than LEVEL_STALE plain steps the level is an old drafting stretch's (or the profile's), and
        the next drafting steps learn it afresh (a mean, as at the start)."""
        if self.level_seen == 0 or self._since_level > LEVEL_STALE:
            self.level_seen = 0  # a new drafting stretch: its level learned afresh
        self.level_seen = min(self.level_seen + 1, 1 / LEVEL_WEIGHT)
        if self.level_seen < 1 / LEVEL_WEIGHT:
            old = self.verify_level
            new = min(max(ratio, old / CLIP), old * CLIP)
            self.verify_level = math.exp(math.log(old) + (math.log(new) - math.log(old)) / self.level_seen)
        else:
            self.verify_level = self._ema(self.verify_level, ratio, LEVEL_WEIGHT)
        self._since_level = 0

    def _ema(self, old: float, new: float, weight: float = COST_WEIGHT) -> float:
        if not self.online:
            return old
        old = max(old, 1e-6)  # a part the profile measured as nothing (the loop next to a forward) still ticks
        new = min(max(new, old / CLIP), old * CLIP)
        return math.exp((1 - weight) * math.log(old) + weight * math.log(new))


