"""The batch spread: how much less than its rows' mean accepted length a drafting step moves a batch.

A batch ends with its slowest row: the rows' mean accepted length overstates what a drafting step moves
the batch (the embedded EAGLE head's 4:2:8 trees at HumanEval batch 8 on the 2-core CPU: 4.4 tokens a
step for the rows still decoding, 3.6 for the batch; the last 5 of 19 steps ran with 1-7 of the 8 rows:
bench/results/2026-12-02-cpu-batch-diagnostics/spread.txt). The step planner (`specdec.planner`) keeps
one spread per batch size, folds each `generate` call's measurement into it (`fold`) with the mean shape
of the caps it was measured at (`shapes`), predicts it for batch sizes not measured yet
(`predicted`), and prices each cap at that spread scaled to the cap's own shape (`by_cap`): deeper caps
spread more. Within a call, once it has drafted a few steps, its own rows correct the batch size's spread
(`in_call`). Batch 1: always 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

__all__ = ["CallTokens", "fold", "in_call", "predicted", "shapes", "by_cap", "SPREAD_WEIGHT", "SPREAD_MIN_STEPS",
           "SPREAD_DEVIATION", "SPREAD_PRIOR_CALLS"]

SPREAD_WEIGHT = 0.25  # weight of one call in the batch-spread correction, after the first few (a running mean)
SPREAD_MIN_STEPS = 4  # drafting steps a call needs before its spread counts
SPREAD_DEVIATION = 0.2  # the per-row deviation a batch size's spread is predicted from before any is measured,
SPREAD_PRIOR_CALLS = 1.0  # counted as this many calls (the demo pair measured 0.15-0.31: docs/smart.md)


@dataclass
class CallTokens:
    """One `generate` call's tokens, for the batch accounting: per row (over the counted steps), the sum of
    each step's mean over its active rows, and that sum over the drafting steps alone."""

    rows: np.ndarray | None = None
    mean_tokens: float = 0.0
    drafted_tokens: float = 0.0
    drafted_steps: int = 0
    drafted_shape: float = 0.0  # the drafting steps' summed shapes (`shapes`) at their caps
    active: np.ndarray | None = None  # the rows still decoding at the last step (None: all)

    def add(self, accepted: np.ndarray, active: np.ndarray | None, mean: float, drafted: bool,
            shape: float = 0.0) -> None:
        if self.rows is None:
            self.rows = np.zeros(accepted.size if active is None else len(active))
        if active is None:
            self.rows += accepted
        else:
            self.rows[np.asarray(active, dtype=bool)] += accepted
        self.mean_tokens += mean
        self.active = None if active is None else np.asarray(active, dtype=bool)
        if drafted:
            self.drafted_tokens += mean
            self.drafted_steps += 1
            self.drafted_shape += shape


@functools.lru_cache(maxsize=None)
def slowest(batch_size: int) -> float:
    """The expected maximum of `batch_size` independent standard normal draws (Blom's approximation, within
    0.03 of the exact value: 0 at 1, 1.43 at 8, 1.77 at 16)."""
    return NormalDist().inv_cdf((batch_size - 0.375) / (batch_size + 0.25))


def predicted(batch_size: int, measured: list[tuple[int, float, int]]) -> float:
    """The spread of a batch size not measured yet, from those that were (batch size, spread, calls that
    measured it; entries with no call or batch size 1 are ignored) and a prior.

    The batch waits for its slowest row: its progress falls short of the rows' mean by about the expected
    maximum of `batch_size` draws (`slowest`) times a per-row deviation, whether that comes from the
    per-step draws or from rows that differ (a prompt the draft reads well beside one it does not). Each
    measured batch size b gives that deviation as (1 / spread_b - 1) / slowest(b); their mean, weighted
    by the calls that measured them, predicts 1 / (1 + deviation * slowest(batch_size)). Assumed 1.0
    instead, Spec-Bench's batch of 8 on the demo pair (the batch of 6 had measured 0.80) drafted a whole
    call at 1.82 s against AR's 1.55, and then measured 0.78, what this predicts from 0.80 at 6
    (bench/results/2026-12-03-cpu-eagle-2844686/diag/tr3_sb8.txt). With none measured the deviation
    is the prior SPREAD_DEVIATION (SPREAD_PRIOR_CALLS calls' weight beside the measured ones): a planner
    that first drafted at batch 16 assumed a spread of 1 and drafted a call at 0.83x AR until that call
    measured 0.79 (the EAGLE head at HumanEval batch 16, bench/results/2026-12-03-cpu-eagle-ee9e9f4/diag/).
    """
    if batch_size < 2:
        return 1.0
    measured = [(b, s, n) for b, s, n in measured if n and b > 1]
    weight = SPREAD_PRIOR_CALLS + sum(n for _, _, n in measured)
    if weight <= 0:  # no prior (SPREAD_PRIOR_CALLS = 0) and nothing measured
        return 1.0
    deviation = (SPREAD_PRIOR_CALLS * SPREAD_DEVIATION + sum(n * (1 / s - 1) / slowest(b)
                                                             for b, s, n in measured)) / weight
    return 1 / (1 + deviation * slowest(batch_size))


def fold(spread: float, shape: float, steps: float, calls: int,
         call: CallTokens) -> tuple[float, float, float, int]:
    """The batch size's (spread, the mean shape of the drafting steps it was measured over, their mean number per
    call (`in_call`), calls that measured it) after one more call (`call`, its rows counted).

    What the rows' per-step means add up to beyond the most tokens any row got is tokens that moved no row
    the batch waited for; charged to the call's drafting steps (plain steps move every row alike, and AR's
    rows all end together), the call's spread = their batch progress over their rows' mean, measured at
    their mean shape (`shapes`), folded in with the same weight. A call that drafted too little to measure
    it ages the spread a call's weight toward 1 (its shape unchanged), as plain steps age the realised rate:
    else one reading (0.756 from EAGLE-3 + SMART's warm-up at HumanEval batch 4) stands for as long as the
    planner decodes plainly (docs/smart.md, "The planner"). Batch 1: unchanged.
    """
    if call.rows is None or call.rows.size < 2:
        return spread, shape, steps, calls
    if call.drafted_steps < SPREAD_MIN_STEPS:
        return math.exp((1 - SPREAD_WEIGHT) * math.log(spread)), shape, steps, calls
    lost = max(call.mean_tokens - float(call.rows.max()), 0.0)
    measured = min(max((call.drafted_tokens - lost) / call.drafted_tokens, 0.25), 1.0)
    weight = max(1 / (calls + 1), SPREAD_WEIGHT)
    return (math.exp((1 - weight) * math.log(spread) + weight * math.log(measured)),
            (1 - weight) * shape + weight * call.drafted_shape / call.drafted_steps,
            (1 - weight) * steps + weight * call.drafted_steps, calls + 1)


def in_call(spread: float, drafted_steps: float, call: CallTokens) -> float:
    """The factor by which this call's rows so far move the batch size's `spread` (1: no evidence yet).

    A call's spread is not its batch size's: a hard prompt among easy ones holds the batch back for the whole
    call (Spec-Bench batch 4 on the demo pair: calls measured 0.79 to 0.99, the low one the call in which the
    head's tree ran 0.85-0.90x AR: bench/results/2026-12-07-cpu-call-spread/). After k drafting steps the
    slowest active row's share of the rows' tokens reads the call's spread, low by the per-step draws: a batch
    size whose calls end at `spread` over `drafted_steps` drafting steps reads, by the shapes model (the
    shortfall of a sum of k draws grows as sqrt(k), relative to it as 1 / sqrt(k)), 1 / (1 + (1 / spread - 1)
    sqrt(drafted_steps / k)) after k. The call's reading over that expectation, to the power k / (k +
    SPREAD_MIN_STEPS * 2) (shrunk toward 1 while the draws dominate), within [0.5, 1.25], is the factor."""
    k = call.drafted_steps
    if call.rows is None or call.rows.size < 2 or k < SPREAD_MIN_STEPS or call.drafted_tokens <= 0:
        return 1.0
    rows = call.rows if call.active is None else call.rows[call.active]
    if rows.size < 2:
        return 1.0
    seen = min(max((call.drafted_tokens - max(call.mean_tokens - float(rows.min()), 0.0)) / call.drafted_tokens,
                   0.25), 1.0)
    expected = 1.0 / (1.0 + (1.0 / spread - 1.0) * math.sqrt(max(drafted_steps, k) / k))
    return min(max(seen / expected, 0.5), 1.25) ** (k / (k + 2 * SPREAD_MIN_STEPS))


def shapes(rate: list[float]) -> np.ndarray:
    """[len(rate)]: for each cap D, the spread of a row's accepted tokens in a step over the root of their mean,
    sd(a) / sqrt(1 + E[a]), from the depth rates (rate[d]: P(a >= d | a >= d - 1); rate[0] unused); 0 at D = 0.

    A batch's shortfall from its rows' mean grows with it: over a call of N tokens a row's steps number about
    N / (1 + E[a]), so its tokens after them spread by sd(a) sqrt(N / (1 + E[a])), relative to N by this shape
    over sqrt(N). Deeper caps spread more: on the demo pair at Spec-Bench batch 4 (Xeon 2-core CPU), drafting
    every step at caps 3 to 6 measured spreads of 0.927, 0.904, 0.902 and 0.880, whose 1 / spread - 1 grow as
    1 : 1.34 : 1.38 : 1.72 where this shape, at the depth rates traced there (0.82-0.92), grows as
    1 : 1.25 : 1.50 : 1.73 (bench/results/2026-12-07-cpu-b4-anatomy/)."""
    p = np.cumprod(np.asarray(rate[1:], dtype=np.float64))  # P(a >= d), d = 1 ..
    d = np.arange(1, len(p) + 1)
    mean = np.concatenate([[0.0], np.cumsum(p)])
    second = np.concatenate([[0.0], np.cumsum((2 * d - 1) * p)])  # E[a^2] = sum over d of (2d - 1) P(a >= d)
    return np.sqrt(np.maximum(second - mean * mean, 0.0)) / np.sqrt(1.0 + mean)


def by_cap(spread: float, shape: float, cap_shapes: np.ndarray) -> np.ndarray:
    """The spread of each cap: a batch size's `spread`, measured over drafting steps of mean `shape`, with its
    shortfall (1 / spread - 1) scaled by each cap's shape over that one (`shapes`); `spread` for every cap while
    no shape was measured."""
    if shape <= 0.0 or spread >= 1.0:
        return np.full(len(cap_shapes), spread)
    return 1.0 / (1.0 + (1.0 / spread - 1.0) * np.asarray(cap_shapes) / shape)
