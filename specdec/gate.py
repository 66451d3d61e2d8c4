"""ValuSpec's per-step scoring gate: score a tree only when the verification it saves beats the scoring.

`ValuSpecFilter` asks its gate before each step (`ScoringGate.plan`) whether to score the tree; an
unscored tree goes to the target whole and the scorer catches up on its tokens at its next forward.

`CostGate` prices both sides with SMART's step cost model (`specdec.cost.CostModel`, fitted at the
batch size from a `Profile`) and the loop's own timers (`StepRecord`, the numbers the generation loop
measured anyway; no sync is added)::

    saving = level * (V(W) - V(r * W))       cost = k * S(W)       score  iff  saving > (1 + margin) * cost

- W: the tree's padded width (``tree.size``, host-known); V: the cost model's verify at padded width,
  ``level`` its measured correction (EMA of measured verify / V over the steps seen);
- r: the measured ratio of the padded width after pruning to the width before (EMA over scored steps,
  from a prior of one half); the filter fills rows cut below the widest one back up to it
  (`specdec.valuspec.fill_to_width`), so r is the padded width's, the one verification pays for;
- S(W): the profile's draft forward over W nodes (`CostModel.draft_seconds`: ValuSpec's scorer is the
  draft model), ``k`` its measured correction from the filter stage's time on scored steps. A profile
  without a draft gives no prior: the scorer's measured seconds are used directly.

Before anything is measured the gate scores (a probe); when even pruning every row to its root could not
pay (``V(W) - V(1)`` below the predicted scoring), it never scores; while it skips scoring, every
`probe_every`-th step is scored anyway to keep r and k fresh. What pruning costs in accepted tokens is not
priced: the default configuration lost accepted tokens on at most 1.4% of steps in the README's
measurements (ValuSpec), and `margin` covers it.

Worked example: a verify curve of V(64) = 80 ms and V(24) = 40 ms (a steep, batched one) with r = 0.375
saves 40 ms per step, against a scoring forward of 25 ms: scored. A flat curve, V(64) = 12 ms and V(24) =
9 ms, saves 3 ms: the tree goes whole, and if V(64) - V(1) is below the scoring too, no step is scored.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from .cost import CostModel, CostsByBatch
from .planner import StepRecord
from .profiling import Profile
from .state import DecodeState
from .tree import TreeBatch

__all__ = ["StepPlan", "ScoringGate", "CostGate", "MARGIN", "PROBE_EVERY"]

MARGIN = 0.1  # the saving must beat the scoring by 10%
PROBE_EVERY = 16  # while skipping, one scored step in this many keeps the estimates fresh
WEIGHT = 0.25  # weight of a new observation in the estimates' moving averages
WIDTH_PRIOR = 0.5  # the width ratio before any step is scored
CLIP = 4.0  # one observation moves an estimate at most this factor (a preempted step is not the norm)


@dataclass(frozen=True)
class StepPlan:
    """What the filter does in one step, decided before the step is scored.

    score: False sends the tree to the target whole. probe: scored to measure, not because it pays.
    saving, cost: the gate's predicted seconds (0 when it did not price the step).
    """

    score: bool = True
    probe: bool = False
    saving: float = 0.0
    cost: float = 0.0


class ScoringGate(ABC):
    """Decides per step whether `ValuSpecFilter` scores, from host-known quantities only (the tree's padded
    width ``tree.size``, the batch, the host state, timings measured so far): a gate must not read device
    tensors, which would add a host sync to every step."""

    def start(self, state: DecodeState) -> None:
        """A new batch of prompts (the batch size is ``state.batch_size``)."""

    @abstractmethod
    def plan(self, tree: TreeBatch, state: DecodeState) -> StepPlan: ...

    def record(self, step: StepRecord, plan: StepPlan, proposed: int) -> None:
        """What the loop measured in a step this gate planned; `proposed`: the padded width before the filter."""


class _Estimates:
    """The gate's measured corrections at one batch size (kept across `generate` calls)."""

    def __init__(self):
        self.level = 1.0  # measured verify / the cost model's
        # padded width after pruning / before; the prior (half) is a guess the first scored steps replace,
        # and it keeps a run of uncut steps from pinning the estimate at exactly 1 (nothing to gain, ever)
        self.width_ratio = WIDTH_PRIOR
        self.scoring: float | None = None  # measured scoring / its prior (seconds when there is no prior)
        self.skipped = 0  # steps skipped since the last scored one


def _ema(old: float | None, new: float) -> float:
    """Geometric moving average; a new value moves it at most a factor CLIP."""
    if old is None:
        return new
    old = max(old, 1e-9)
    new = min(max(new, old / CLIP), old * CLIP)
    return math.exp((1 - WEIGHT) * math.log(old) + WEIGHT * math.log(max(new, 1e-9)))


class CostGate(ScoringGate):
    """Scores a step when SMART's step cost model says the verification saved beats the scoring (module
    docstring). cost_model: a `CostModel` (at the running batch size) or a `Profile` (fitted per batch size).
    online=False prices with the cost model as profiled (no correction from the timers; the scoring's prior
    when the profile has a draft); the width ratio is learned either way."""

    def __init__(self, cost_model: CostModel | Profile, *, margin: float = MARGIN, probe_every: int = PROBE_EVERY,
                 online: bool = True):
        if not isinstance(cost_model, (CostModel, Profile)):
            raise ValueError(f"cost_model: expected a CostModel or a Profile, got {type(cost_model).__name__}")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 <= margin < 10:
            raise ValueError(f"margin: expected a number in [0, 10), got {margin!r}")
        if isinstance(probe_every, bool) or not isinstance(probe_every, int) or probe_every < 0:
            raise ValueError(f"probe_every: expected an int >= 0 (0: no probes), got {probe_every!r}")
        if not isinstance(online, bool):
            raise ValueError(f"online: expected a bool, got {online!r}")
        self.margin, self.probe_every, self.online = float(margin), probe_every, online
        self._costs = CostsByBatch(cost_model)
        self._estimates: dict[int, _Estimates] = {}

    def start(self, state: DecodeState) -> None:
        b = state.batch_size
        self.cost, self.est = self._costs(b), self._estimates.setdefault(b, _Estimates())
        if not self.online and self.cost.draft_layer is not None:
            self.est.scoring = 1.0  # the prior as profiled

    def _prior(self, width: int) -> float | None:
        """The profile's scorer forward over `width` nodes per row (None: profiled without a draft)."""
        return None if self.cost.draft_layer is None else float(self.cost.draft_seconds(width))

    def plan(self, tree: TreeBatch, state: DecodeState) -> StepPlan:
        width, est = tree.size, self.est
        verify = lambda n: est.level * float(self.cost.verify_seconds(n))  # noqa: E731
        prior = self._prior(width)
        cost = None if est.scoring is None else est.scoring * (prior if prior is not None else 1.0)
        bound = cost if cost is not None else prior
        if bound is not None and verify(width) - verify(1) <= (1 + self.margin) * bound:
            return StepPlan(score=False, saving=verify(width) - verify(1), cost=bound)  # hopeless: no probe
        if cost is None:  # nothing measured yet
            return StepPlan(score=True, probe=True)
        saving = verify(width) - verify(max(est.width_ratio * width, 1.0))
        if saving > (1 + self.margin) * cost:
            return StepPlan(score=True, saving=saving, cost=cost)
        probe = self.probe_every > 0 and est.skipped + 1 >= self.probe_every
        return StepPlan(score=probe, probe=probe, saving=saving, cost=cost)

    def record(self, step: StepRecord, plan: StepPlan, proposed: int) -> None:
        est = self.est
        base = float(self.cost.verify_seconds(step.width))
        if self.online and base > 0 and step.verify > 0:
            est.level = _ema(est.level, step.verify / base)
        if not plan.score:
            est.skipped += 1
            return
        est.skipped = 0
        prior = self._prior(proposed)
        if self.online or prior is None:
            est.scoring = _ema(est.scoring, step.filter / prior if prior else step.filter)
        est.width_ratio = _ema(est.width_ratio, step.width / proposed)
