"""ValuSpec's per-step gate: score a tree only when the verification it saves beats the scoring, and
then verify the padded width that yields the most tokens per second.

`ValuSpecFilter` asks its gate before each step (`ScoringGate.plan`) whether to score the tree; an
unscored tree goes to the target whole and the scorer catches up on its tokens at its next forward. After
a scored step's threshold rule, the gate may cut the tree further to a padded width (`ScoringGate.size`).

`CostGate` prices both sides with SMART's step cost model (`specdec.cost.CostModel`, fitted at the
batch size from a `Profile`, corrected by the loop's own timers through `specdec.online_costs.OnlineCosts`:
the StepRecords the generation loop measured anyway; no sync is added)::

    saving = V(W) - V(r * W) - (1 - q) * C       cost = k * S(W)       score  iff  saving > (1 + margin) * cost

- W: the tree's padded width (``tree.size``, host-known); V: the cost model's verify stage at a padded
  width, corrected by two measured ratios (EMAs of measured / modelled): the whole trees' (unscored steps)
  at W and the pruned trees' (scored steps) at r * W, so that a curve flat where the profile said steep
  (a batch-1 CPU forward of 2 to 64 nodes) is learned as flat;
- r: the measured ratio of the padded width after pruning to the width before (EMA over scored steps,
  from a prior of one half);
- q: the share of the whole tree's predicted tokens that a scored step keeps (EMA over the sized steps,
  from sizing's own prediction; 1 before any), and C the measured seconds of an unscored step (offline:
  the cost model's loop and V(W)): tokens cut are seconds spent again to produce them. Without that term
  the gate scored a third of the batch-1 retrieval steps on HumanEval (saving 2.6 ms of verification for
  2.5 ms of scoring, as predicted, and losing 1.3% of the accepted tokens to sizing's cuts), and ran 4%
  below the unfiltered trees;
- S(W): the profile's draft forward over W nodes (`CostModel.draft_seconds`: ValuSpec's scorer is the
  draft model), ``k`` its measured correction from the filter stage's time on scored steps. A profile
  without a draft gives no prior: the scorer's measured seconds are used directly.

Before anything is measured the gate scores (a probe); when even pruning every row to its root could not
pay (``V(W) - V(1)`` below the predicted scoring), it does not score, except, when that prediction comes
from measured scoring (online), the skipping probes below. Otherwise it probes both ways, so that
both sides of its test stay measured: while it skips scoring, a step is scored after `probe_every` skipped
ones (the scoring's cost and the width it leaves); while it scores, a step goes whole after `probe_every`
scored ones (online only: the verification of the full width, which a scoring gate never sees otherwise). Each probe
doubles the wait for the next of its kind, up to `MAX_PROBE_EVERY` (a batch size whose answer does not
change spends little on asking again), unless a scoring probe moved the scoring's estimate by 10% or
more; a step decided on its merits resets it.

Sizing (``size=True``): the threshold rule keeps what the scorer deems likely, not what pays. On a scored
step each row's kept nodes are ranked by their path probability P under the scorer (a parent's is at least
its child's, so every top-k is closed under ancestors), and the gate keeps the top W - 1 per row for the W
that maximises the predicted tokens per second, from 2 (the rule's call is whether a row keeps nothing;
sizing only chooses how many of its candidates go) to the widest row the rule kept::

    W* = argmax_W  sum over active rows (1 + a * [sum of the row's top W - 1 P])  /  (F + V(W))

where F is the measured rest of a scored step (propose, scoring, commit) and a = a_d, by the node's depth
d, the measured ratio of the depth-d candidates accepted to the sum of their P verified (ratios of
decayed sums, from a pseudo-count at 1): the demo draft underestimates the target's agreement, and since
P is a product along the path, by more the deeper the node (one scale for all depths, fitted mostly on
the shallow nodes, undervalued the deep ones and cut the draft's 10-node trees to 3 at batch 8, slower
than verifying them whole). Computed on the device; W*, the predicted sums by depth and q reach the host
with the compaction's one sync. Under a batch the verify cost follows the padded width, so W* is one width for all
rows (a row cut below it would save only attention).

Worked example: a verify curve of V(64) = 80 ms and V(24) = 40 ms (a steep, batched one) with r = 0.375
saves 40 ms per step, against a scoring forward of 25 ms: scored. A flat curve, V(64) = 12 ms and V(24) =
9 ms, saves 3 ms: the tree goes whole, and if V(64) - V(1) is below the scoring too, no step is scored.
Sizing one row whose kept nodes have P = 0.9, 0.5, 0.1 with a = 1, F = 2 ms, V(2..4) = 5, 6, 10 ms: the
rates are 1.9/7, 2.4/8, 2.5/12 tokens per ms, so W* = 3 (the root and two nodes).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .cost import CostModel
from .cost_by_batch import CostsByBatch
from .online_costs import OnlineCosts
from .profiling import Profile
from .stages import StepRecord
from .state import DecodeState
from .tree import TreeBatch

__all__ = ["StepPlan", "ScoringGate", "CostGate", "MARGIN", "PROBE_EVERY", "MAX_PROBE_EVERY", "DEPTHS"]

MARGIN = 0.1  # the saving must beat the scoring by 10%
PROBE_EVERY = 16  # while skipping, the first probe comes after this many skipped steps ...
MAX_PROBE_EVERY = 256  # ... and each probe that finds no pay doubles the interval, up to this
PROBE_AGREE = math.log(1.1)  # ... when its measurement moved the scoring estimate by less than 10%
WEIGHT = 0.25  # weight of a new observation in the estimates' moving averages
WIDTH_PRIOR = 0.5  # the width ratio before any step is scored
CLIP = 4.0  # one observation moves an estimate at most this factor (a preempted step is not the norm)
ACCEPT_DECAY = 0.97  # per sized step, for the accepted / predicted sums (about 30 steps of memory)
ACCEPT_PRIOR = 1.0  # pseudo-count (in candidates) behind each depth's ratio of 1
DEPTHS = 16  # depths with their own acceptance scale (deeper nodes share the last)


@dataclass(frozen=True)
class StepPlan:
    """What the filter does in one step, decided before the step is scored.

    score: False sends the tree to the target whole. probe: scored to measure, not because it pays.
    saving, cost: the gate's predicted seconds (0 when it did not price the step). predicted: by depth
    1 .. DEPTHS, the scorer's path probabilities of the sized tree's candidates, summed over active rows,
    and retained: the share of the whole tree's predicted tokens the sized tree keeps (both filled in
    after sizing; empty and None when the step was not sized).
    """

    score: bool = True
    probe: bool = False
    saving: float = 0.0
    cost: float = 0.0
    predicted: tuple[float, ...] = ()
    retained: float | None = None


class ScoringGate(ABC):
    """Decides per step whether `ValuSpecFilter` scores, from host-known quantities only (the tree's padded
    width ``tree.size``, the batch, the host state, timings measured so far): a gate must not read device
    tensors, which would add a host sync to every step."""

    def start(self, state: DecodeState) -> None:
        """A new batch of prompts (the batch size is ``state.batch_size``)."""

    @abstractmethod
    def plan(self, tree: TreeBatch, state: DecodeState) -> StepPlan: ...

    def size(self, tree: TreeBatch, keep: Tensor, scores: Tensor, active: Tensor) -> tuple[Tensor, Tensor | None]:
        """After the threshold rule on a scored step: (keep [B, T] bool, [DEPTHS + 1] float32 on the device:
        the kept candidates' path probabilities summed by depth, then the share of the whole tree's predicted
        tokens the kept tree holds; or None when the gate does not size). keep: what the rule kept, closed
        under ancestors; scores: [B, T] float32 path-mean log-probs; active: [B] bool. Default: keep as is."""
        return keep, None

    def record(self, step: StepRecord, plan: StepPlan, proposed: int) -> None:
        """What the loop measured in a step this gate planned; `proposed`: the padded width before the filter."""


class _Estimates:
    """The gate's measured corrections at one batch size (kept across `generate` calls)."""

    def __init__(self, costs: OnlineCosts, probe_every: int):
        # measured verify / the cost model's: on scored steps (the pruned widths), on unscored ones (whole
        # trees: None until one is measured, then the cut's stands in); two points, because a curve can be
        # flat where the profile said steep (a batch-1 CPU forward of 2 to 64 nodes), and one scale for
        # both would keep the profile's difference between them
        self.cut, self.whole = 1.0, None
        self.costs = costs  # the whole verify curve, corrected per width bucket (sizing prices every width)
        # padded width after pruning / before; the prior (half) is a guess the first scored steps replace,
        # and it keeps a run of uncut steps from pinning the estimate at exactly 1 (nothing to gain, ever)
        self.width_ratio = WIDTH_PRIOR
        self.scoring: float | None = None  # measured scoring / its prior (seconds when there is no prior)
        self.fixed: float | None = None  # a scored step's seconds outside verification
        self.whole_step: float | None = None  # an unscored step's seconds
        self.retained: float | None = None  # the share of the whole tree's predicted tokens a sized step keeps
        self.accepted, self.predicted = np.zeros(DEPTHS), np.zeros(DEPTHS)  # decayed sums by depth
        self.skipped, self.scored = 0, 0  # the current run of skipped (scored) steps
        # probe intervals: skipping, score after `score_every` steps; scoring, skip after `skip_every`
        self.score_every, self.skip_every = probe_every, probe_every

    @property
    def accept_scale(self) -> np.ndarray:
        """[DEPTHS]: a_d, candidates accepted at depth d over their predicted sum."""
        return (self.accepted + ACCEPT_PRIOR) / (self.predicted + ACCEPT_PRIOR)


def _doubled(interval: int) -> int:
    return min(2 * interval, MAX_PROBE_EVERY)


def _ema(old: float | None, new: float) -> float:
    """Geometric moving average; a new value moves it at most a factor CLIP."""
    if old is None:
        return new
    old = max(old, 1e-9)
    new = min(max(new, old / CLIP), old * CLIP)
    return math.exp((1 - WEIGHT) * math.log(old) + WEIGHT * math.log(max(new, 1e-9)))


class CostGate(ScoringGate):
    """Scores a step when SMART's step cost model says the verification saved beats the scoring, and sizes
    the scored tree to the padded width with the most predicted tokens per second (module docstring).
    cost_model: a `CostModel` (at the running batch size) or a `Profile` (fitted per batch size).
    online=False prices with the cost model as profiled (no correction from the timers; the scoring's prior
    when the profile has a draft); the width ratio and the acceptance scale are learned either way.
    size=False keeps the threshold rule's tree (the gate decides only whether to score)."""

    def __init__(self, cost_model: CostModel | Profile, *, margin: float = MARGIN, probe_every: int = PROBE_EVERY,
                 online: bool = True, size: bool = True):
        if not isinstance(cost_model, (CostModel, Profile)):
            raise ValueError(f"cost_model: expected a CostModel or a Profile, got {type(cost_model).__name__}")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 10:
            raise ValueError(f"margin: expected a number in [0, 10), got {margin!r}")
        if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 0:
            raise ValueError(f"probe_every: expected an int >= 0 (0: no probes), got {probe_every!r}")
        for name, value in (("online", online), ("size", size)):
            if not isinstance(value, bool):
                raise ValueError(f"{name}: expected a bool, got {value!r}")
        self.margin, self.probe_every, self.online, self.sizes = float(margin), probe_every, online, size
        self._costs = CostsByBatch(cost_model)
        self._estimates: dict[int, _Estimates] = {}

    def start(self, state: DecodeState) -> None:
        b = state.batch_size
        self.cost = self._costs(b)
        self.est = self._estimates.get(b)
        if self.est is None:
            self.est = self._estimates[b] = _Estimates(OnlineCosts(self.cost, self.online), self.probe_every)
            if not self.online and self.cost.draft_layer is not None:
                self.est.scoring = 1.0  # the prior as profiled

    def _prior(self, width: int) -> float | None:
        """The profile's scorer forward over `width` nodes per row (None: profiled without a draft)."""
        return None if self.cost.draft_layer is None else self.est.costs.profiled_draft(width)

    def verify(self, width: float, whole: bool = False) -> float:
        """The verify stage at a padded `width`: the cost model's, corrected by what was measured on the
        scored steps (the widths pruning leaves) or, `whole`, on the unscored ones (the widths proposed)."""
        ratio = self.est.whole if whole and self.est.whole is not None else self.est.cut
        return ratio * self.est.costs.profiled(width)

    def plan(self, tree: TreeBatch, state: DecodeState) -> StepPlan:
        width, est = tree.size, self.est
        score_probe = self.probe_every > 0 and est.skipped + 1 >= est.score_every  # a skipping gate's probe is due
        prior = self._prior(width)
        cost = None if est.scoring is None else est.scoring * (prior if prior is not None else 1.0)
        bound = cost if cost is not None else prior
        full = self.verify(width, whole=True)
        if bound is not None and full - self.verify(1) <= (1 + self.margin) * bound:
            # hopeless. Priced by the profile, or offline, that stands; priced by a measurement, it is
            # probed on the usual schedule: one cold first scoring step (37 ms against a usual 3-5 at
            # Spec-Bench translation, batch 1) must not stop the gate from ever scoring again
            probe = self.online and cost is not None and score_probe
            return StepPlan(score=probe, probe=probe, saving=full - self.verify(1), cost=bound)
        if cost is None:  # nothing measured yet
            return StepPlan(score=True, probe=True)
        saving = full - self.verify(max(est.width_ratio * width, 1.0))
        if est.retained is not None:  # the tokens sizing cuts, priced as the time to produce them again
            step = est.whole_step if self.online and est.whole_step is not None else float(self.cost.loop) + full
            saving -= (1 - est.retained) * step
        if saving > (1 + self.margin) * cost:
            # now and then a paying step goes whole anyway, to measure the full width's verification (only
            # online: offline nothing would learn from it)
            skip = self.online and self.probe_every > 0 and est.scored + 1 >= est.skip_every
            return StepPlan(score=not skip, probe=skip, saving=saving, cost=cost)
        return StepPlan(score=score_probe, probe=score_probe, saving=saving, cost=cost)

    def size(self, tree: TreeBatch, keep: Tensor, scores: Tensor, active: Tensor) -> tuple[Tensor, Tensor | None]:
        if not self.sizes:
            return keep, None
        B, T = tree.tokens.shape
        est = self.est
        # P: each kept non-root node's path probability under the scorer; its value a_d * P, taken as the least
        # along its root path (so a child never ranks above its parent, whatever a_d does with depth or a mean
        # times a depth with rounding); the root ranks first, cut nodes (and padding slots) last
        depth = tree.depth.clamp(max=DEPTHS)  # [B, T]
        scale = torch.tensor(np.concatenate([[0.0], est.accept_scale]), dtype=scores.dtype, device=scores.device)
        path_p = torch.exp(scores * tree.depth)
        value = scale[depth] * path_p
        value[:, 0] = float("inf")
        value = tree.path_min(value)
        whole = ((1 + value[:, 1:].masked_fill(~tree.valid[:, 1:], 0.0).sum(1)) * active).sum()  # every node verified
        value = value.masked_fill(~keep, -1.0)
        ranked, order = torch.sort(value, dim=1, descending=True, stable=True)  # ties: lower index (parent) first
        gains = torch.cat([torch.zeros_like(ranked[:, :1]), ranked[:, 1:].clamp(min=0).cumsum(1)], 1)  # [B, T]
        tokens = ((1 + gains) * active[:, None]).sum(0)  # [T]: index w - 1 -> width w
        fixed = est.fixed if est.fixed is not None else float(self.cost.loop) + (self._prior(T) or 0.0)
        seconds = fixed + est.costs.verify(np.arange(1, T + 1, dtype=np.float64))  # [T] host
        rate = tokens / torch.as_tensor(seconds, dtype=tokens.dtype, device=tokens.device)
        width, kept = torch.arange(1, T + 1, device=keep.device), keep.sum(1).amax()
        # never wider than the rule kept, and never the roots alone when it kept a candidate: emptying a
        # tree is the calibrated rule's call, sizing only chooses how many of its candidates go
        rate = rate.masked_fill((width > kept) | ((width == 1) & (kept > 1)), float("-inf"))
        best = rate.argmax()  # a device scalar: W* - 1
        rank = torch.empty_like(order).scatter_(1, order, torch.arange(T, device=order.device).expand(B, T))
        sized = keep & (rank <= best)
        verified = torch.where(sized & (depth > 0) & active[:, None], path_p, 0.0)  # [B, T]
        predicted = torch.zeros(DEPTHS + 1, dtype=scores.dtype, device=scores.device)
        predicted.scatter_add_(0, depth.flatten(), verified.flatten())
        retained = (tokens[best] / whole.clamp(min=1e-9)).clamp(max=1.0)
        return sized, torch.cat([predicted[1:], retained.view(1)])

    def record(self, step: StepRecord, plan: StepPlan, proposed: int) -> None:
        est = self.est
        base = est.costs.profiled(step.width)
        if self.online and base > 0 and step.verify > 0:
            if plan.score:
                est.cut = _ema(est.cut, step.verify / base)
            else:
                est.whole = _ema(est.whole, step.verify / base)
            est.costs.observe_verify(step, None)
        # Each probe doubles the wait for the next one of its kind; a step decided on its merits resets it
        # (the first probe, before anything was measured, priced nothing: cost 0, and counts for neither).
        if not plan.score:
            est.whole_step = _ema(est.whole_step, step.propose + step.filter + step.verify + step.commit)
            est.skipped, est.scored = est.skipped + 1, 0
            est.skip_every = _doubled(est.skip_every) if plan.probe else self.probe_every
            return
        est.skipped, est.scored = 0, est.scored + 1
        prior = self._prior(proposed)
        before = est.scoring
        if self.online or prior is None:
            est.scoring = _ema(est.scoring, step.filter / prior if prior else step.filter)
        # a probe that found the scoring's cost as estimated doubles the wait; one that found it off by more
        # than PROBE_AGREE keeps probing at the base rate until the estimate has followed
        agrees = before is not None and abs(math.log(max(est.scoring, 1e-9) / max(before, 1e-9))) < PROBE_AGREE
        est.score_every = _doubled(est.score_every) if plan.probe and plan.cost and agrees else self.probe_every
        est.width_ratio = _ema(est.width_ratio, step.width / proposed)
        est.fixed = _ema(est.fixed, step.propose + step.filter + step.commit)
        if plan.predicted:
            # a row that accepted k candidates accepted one at each depth 1 .. k (the bonus token is none)
            drafted = np.minimum(np.asarray(step.accepted) - 1, DEPTHS)
            at_depth = (drafted[:, None] >= np.arange(1, DEPTHS + 1)).sum(0)
            est.accepted = ACCEPT_DECAY * est.accepted + at_depth
            est.predicted = ACCEPT_DECAY * est.predicted + np.asarray(plan.predicted)
        if plan.retained is not None:
            new = min(max(plan.retained, 0.0), 1.0)
            est.retained = new if est.retained is None else (1 - WEIGHT) * est.retained + WEIGHT * new
