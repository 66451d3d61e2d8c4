"""The step planner's realised rate: drafting steps' measured tokens per second over their predicted, which
scales the decision between drafting and plain steps (`specdec.realised`; the planner's fixtures:
test_planner.py)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.planner import WARMUP, StepPlanner, StepRecord, TreeFacts
from tests.helpers import step_record
from tests.methods.test_planner import MAX_DEPTH, CountingDepths, RecordingDepths, best_cap, knee_cost


@pytest.mark.parametrize("realise", [False, True])
def test_drafting_that_realises_less_than_planned_turns_plain(realise):
    """Drafting steps that each take twice their planned seconds for half their planned tokens: with the
    realised-rate correction the planner stops drafting, retrying rarely (the evidence ages with every step);
    without it (costs and acceptance frozen) it goes on, and takes no plain step to re-measure c_T (frozen
    costs would not learn from one)."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, online=False, realise=realise, probe_every=1000)
    planner.start(cost)
    planner.depths = RecordingDepths(0.7)
    depths, c_t = [], 0
    for _ in range(200):
        plan = planner.plan(backlog=1)
        if plan.depth == 0 and plan.probe:  # a c_T probe: frozen costs take none (asserted below)
            c_t += 1
            planner.record(step_record(1, cost.ar_step), None)
            continue
        depths.append(plan.depth)
        if plan.depth:
            seconds = 2 * plan.seconds
            step = StepRecord(8, np.array([max(plan.length / 2, 1.0)]), 0.2 * seconds, 0.0, 0.8 * seconds, 0.0)
            planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
        else:
            planner.record(step_record(1, cost.ar_step), None)
    assert c_t == 0
    if realise:
        drafted = [i for i, d in enumerate(depths) if d]
        assert drafted[0] == 0 and len(drafted) <= 5 and min(np.diff(drafted)) >= 40 and planner.state.realised < 0.9
    else:
        assert all(d > 0 for d in depths) and planner.state.realised == 1.0


def test_realised_rate_is_unbiased_for_whole_token_steps():
    """Steps that accept 1 or 4 tokens where 2.5 were predicted, in the predicted seconds, realise their plan:
    the realised rate is a ratio of sums (a log-mean of per-step ratios reads 0.8 and turns drafting off).
    Steps that take twice their predicted seconds realise half; plain steps age that evidence."""
    from specdec.planner import Plan

    planner = StepPlanner(MAX_DEPTH, online=False)
    planner.start(knee_cost(6, 1e-3))
    plan = Plan(3, 2.5, 0.02)
    for i in range(40):
        planner._realise(plan, 1.0 if i % 2 else 4.0, 0.02)
    assert planner.state.realised == pytest.approx(1.0, abs=0.05)  # the decayed window ends on a 1: 0.97
    for _ in range(200):
        planner._realise(plan, 2.5, 0.04)
    assert planner.state.realised == pytest.approx(0.5, abs=0.01)
    for _ in range(100):  # plain steps age the evidence: the rate returns toward the pseudo-step's 1
        planner._realise(None)
    assert 0.55 < planner.state.realised < 0.75
    for _ in range(200):
        planner._realise(None)
    assert 0.95 < planner.state.realised < 1.0
    for _ in range(3):  # and drafting steps that realise half pull it down again at once
        planner._realise(plan, 2.5, 0.04)
    assert planner.state.realised < 0.8


def draft_step(planner, speed, backlog=1, share=1.0):
    """One drafting step at `speed` times its planned rate of seconds, accepting `share` of its planned tokens
    (at least one); the planner learns from it at once. Returns its plan."""
    plan = planner.plan(backlog=backlog)
    assert plan.depth > 0
    seconds = plan.seconds / speed
    planner.record(StepRecord(8, np.array([max(share * plan.length, 1.0)]), 0.2 * seconds, 0.0, 0.8 * seconds, 0.0),
                   TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=backlog))
    planner._learn()
    return plan


def test_only_steady_drafting_steps_move_the_realised_rate():
    """A drafting step whose catch-up is longer than the previous step's tokens (it resumes after plain steps,
    or its draft is cold with the prompt) is priced mostly by the catch-up's estimate: however far it misses
    its plan, the realised rate only ages. Steady steps (catch-up of the previous step's tokens) move it, as
    does a call's first counted step when its catch-up is no longer than a drafting step can emit."""
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    planner.start(knee_cost(6, 1e-3))
    planner.depths = RecordingDepths(0.7)
    draft = lambda backlog, speed: draft_step(planner, speed, backlog=backlog)  # noqa: E731
    draft(MAX_DEPTH + 5, 2.0)  # a cold draft's prompt in the call's first counted step, twice as fast as planned
    assert planner.state.realised == 1.0
    for _ in range(3):  # resumes after plain steps (a catch-up of 9 tokens after a step of about 3)
        draft(9, 2.0)
    assert planner.state.realised == 1.0
    draft(2, 2.0)  # a steady step: it counts
    assert planner.state.realised > 1.2
    planner.start(knee_cost(6, 1e-3))  # a new call: its first counted step counts when its catch-up is short
    before = planner.state.realised
    draft(MAX_DEPTH + 1, 0.5)
    assert planner.state.realised < before


def test_warm_up_probes_do_not_move_the_realised_rate():
    """The warm-up probes are priced by the priors they exist to replace: however far they miss their plans
    (here at half the tokens in twice the seconds, steady steps all), the realised rate stays 1 and the
    planner drafts on; the same miss by the plans that follow moves it at once."""
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    planner.start(knee_cost(6, 1e-3))
    planner.depths = CountingDepths(0.9)
    plans, best = [], []
    for _ in range(WARMUP):
        best.append(best_cap(planner))
        plans.append(draft_step(planner, 0.5, share=0.5))
    assert all(p.probe and p.warmup for p in plans)
    assert [p.depth for p in plans] == best and min(best) < MAX_DEPTH  # at the best cap, not the deepest
    assert planner.state.realised == 1.0
    plan = draft_step(planner, 0.5, share=0.5)  # frozen costs: no plain steps re-measure c_T after the warm-up
    assert not plan.probe
    assert planner.state.realised < 0.9
