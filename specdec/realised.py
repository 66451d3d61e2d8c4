"""The step planner's realised rate (`StepPlanner._realise`): each step ages the evidence, and a drafting
step folds its measured tokens and seconds in beside its plan's. The rate is the drafting steps' tokens per
second over their predicted, which scales the predicted gain when choosing between drafting and plain
decoding: a bias the cost and acceptance estimates keep (the demo pair at batch 4 on the 2-core CPU: predicted 1.34x,
0.91x measured by the planner's own c_T) then turns drafting off instead of persisting. The depth
choice is unchanged.

A ratio of sums, decayed by every step (plain ones too), with one pseudo-step of the last drafting
plan's own numbers (a realised rate of 1):
- A mean of per-step ratios is biased low: a step accepts a whole number of tokens around its
  expectation (1 or 4 where 2.5 was predicted: a log-mean of 0.8, not 1). On the demo pair at
  HumanEval batch 1 (586 drafting steps) the per-step ratios' geometric mean is 0.967 where the
  ratio of sums is 1.025, and the former running log-mean was at 0.85 or below on a tenth of the
  steps (bench/results/2026-12-02-cpu-realised/).
- Evidence that ages only with drafting steps froze a low rate once the planner turned plain (553 of
  691 steps plain at 1.07x AR where drafting every step ran 1.11x: bench/results/*-cpu-smart-batch/).
  Aged by plain steps too, a noisy stretch's rate returns toward 1, while a real bias gathers
  evidence with each retry, so retries stay rare (a quarter of the planned rate: 4 of 200 steps).
- The warm-up probes are priced by the priors they exist to replace: they only age it too (counted,
  they left EAGLE-3 + SMART at HumanEval batch 4 at 0.81 and plain; bench/results/*-eagle-3ce6e94/).
- A drafting step that resumes after plain steps (or whose draft is cold in the call) pays a long
  catch-up, whose price is the catch-up's estimate, not drafting's: `StepPlanner._learn` ages the evidence with it
  and does not fold it in. On the demo pair at Spec-Bench batch 16 on the 2-core CPU, a cold probe
  priced at 58 ms ran in 35, the realised rate rose to 1.26, and the planner drafted 13 steps at
  0.88x AR that its predictions (0.97x) would not have taken.
"""

from __future__ import annotations

from dataclasses import dataclass

from .online_costs import CLIP

__all__ = ["RealisedRate", "REALISED_WEIGHT"]

REALISED_WEIGHT = 0.03  # per step, drafting or plain, the decay of the realised-rate sums (~33 steps count)


@dataclass
class RealisedRate:
    """Decayed sums of the drafting steps' measured and predicted tokens and seconds (module docstring)."""

    sums: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # decayed: tokens, L, seconds, C
    prior: tuple[float, float] = (0.0, 0.0)  # the last drafting plan's L and C: a pseudo-step at 1

    @property
    def value(self) -> float:
        """Measured tokens per second over predicted, within [0.25, 4]; 1 before any drafting step."""
        (t, n, s, c), (p, q) = self.sums, self.prior
        return min(max(((t + p) / (n + p)) / ((s + q) / (c + q)), 0.25), 4.0) if p > 0 else 1.0

    def step(self, length: float, planned: float, tokens: float, seconds: float) -> None:
        """One step: the evidence ages; a drafting step planned at `length` tokens in `planned` seconds that
        took `tokens` and `seconds` is folded in (a plain step, or one not counted: zeros)."""
        keep = 1 - REALISED_WEIGHT
        t, n, s, c = (keep * x for x in self.sums)
        if seconds > 0 and planned > 0 and length > 0:
            # one step counts at most CLIP times its plan: a one-off (a GPU's Triton compile of a new tree
            # shape, over a second against a 10 ms plan) is no drafting cost
            t, n, s, c = t + tokens, n + length, s + min(seconds, CLIP * planned), c + planned
            self.prior = (length, planned)
        self.sums = (t, n, s, c)
