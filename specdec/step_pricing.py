"""Prices inside a drafting step, for the supplier growing it (`StepPricing`, part of
`specdec.planner.StepPlanner`): what the step has spent outside verification, K2's cost vector, and how wide
the next draft layer should be; all from the planner's corrected costs (`OnlineCosts`) at the step's context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .online_costs import OnlineCosts

__all__ = ["StepPricing"]


class StepPricing:
    """Mixed into `StepPlanner`, whose `costs` (the batch size's `OnlineCosts`), `context` (the step's tokens
    of context, or None) and `host` (the supplier drafts on the host) it reads."""

    costs: OnlineCosts
    context: float | None
    host: bool

    def frontier_width(self, bounds: list[float], onward: float, length: float, spent: float, width: int) -> int:
        """How many of each row's best kept nodes the next draft layer forwards: 0 (stop drafting) to
        len(bounds).

        bounds[i]: the most that forwarding every row's i-th best node can add to the rows' accepted tokens
        (a child is accepted only after its parent: the parents' calibrated probabilities, summed over
        rows); onward: the measured chance of going one token deeper; length: the rows' summed L so far;
        spent: the step's seconds so far outside verification; width: the padded tree width now. A forward of
        w nodes costs a draft layer w wide and, at least, one more verified column. The width is the one
        whose expected gain (bounds times onward) leaves the step the best tokens per second; the forward runs
        only if even its best possible gain (the bounds) beats the step as it is.
        """
        c, context = self.costs, self.context
        now = spent + c.verify(width, context)
        column = c.verify(width + 1, context) - c.verify(width, context)
        best, best_rate, bound = 0, 0.0, 0.0
        for w, b in enumerate(bounds, 1):
            bound += b
            cost = now + c.layer(w) + column
            rate = (length + onward * bound) / cost
            if rate > best_rate and (length + bound) / cost > length / now:
                best, best_rate = w, rate
        return best

    def cost_vector(self, spent: float, width: int) -> list[float]:
        """K2's (c0, lambda, gamma, delta, rho) for a step that has spent `spent` seconds outside
        verification: the verify fit scaled by this width's correction."""
        c = self.costs
        v = c.model.verify
        scale = c.verify_scale(max(width, 2), self.context)
        return [spent + scale * v.c0, 0.0, scale * v.gamma, v.delta, v.rho]

    def spent(self, backlog: int, layer_widths: list[int]) -> float:
        """Seconds a step has spent outside verification after its catch-up (or query) and layer forwards
        of `layer_widths` nodes."""
        c = self.costs
        if self.host:
            return c.rest + c.query
        return c.rest + c.catch_up(backlog) + sum(c.layer(w) for w in layer_widths)
