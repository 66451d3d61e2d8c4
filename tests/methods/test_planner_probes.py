"""The step planner's probes while plain decoding pays: several drafting steps, weighed right after them at
half the margin, and backing off by what they measured (the planner's fixtures: test_planner.py)."""

from __future__ import annotations

import numpy as np
import pytest

from specdec.planner import (BACKOFF, BACKOFF_FAR, FAR, FAR_ROWS, MARGIN, PROBE_STEPS, StepPlanner, StepRecord,
                             TreeFacts)
from tests.methods.test_planner import MAX_DEPTH, FixedDepths, RecordingDepths, brute_force, knee_cost


@pytest.mark.parametrize("found", [0.9, 0.3])
def test_a_probe_from_plain_decoding_is_weighed_right_after_it(found):
    """A probe taken while plain decoding pays is PROBE_STEPS drafting steps at the best cap (its steps
    after the first are steady: they measure what drafting realises now), weighed by a full plan at the very
    next step: one that finds drafting paying again resumes it at once, not after REPLAN_EVERY - 1 more plain
    steps (seen on the demo pair at batch 4: seven plain steps after each probe that said drafting paid);
    one that finds it still losing goes back to plain steps."""
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=4)
    planner.start(knee_cost(6, 1e-3))
    planner.depths = FixedDepths(0.3)  # drafting does not pay, but could: plain steps and probes
    plans = [planner.plan() for _ in range(planner.probe_every + PROBE_STEPS - 1)]
    assert [p.depth > 0 for p in plans] == [False] * 3 + [True] * PROBE_STEPS and all(p.probe for p in plans[3:])
    planner.depths = FixedDepths(found)  # what the probe found
    plan = planner.plan()
    assert not plan.probe and (plan.depth > 0) == planner.state.drafting == (found == 0.9)


def probe_gaps(planner: StepPlanner, steps: int) -> tuple[list[int], float]:
    """The intervals between the drafting probes of `steps` steps (from one probe's start to the next's,
    less the probe's own later steps), each step learned at once (a drafting one at its planned length and
    seconds, FAR_ROWS rows: evidence enough to call drafting far), and the best gain a full plan weighed."""
    plans = []
    for _ in range(steps):
        plan = planner.plan()
        plans.append(plan)
        if plan.depth:
            record = StepRecord(8, np.full(FAR_ROWS, plan.length), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds, 0.0)
            planner.record(record, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
        else:
            planner.record(StepRecord(1, np.ones(FAR_ROWS), 0.0, 0.0, plan.seconds, 0.0), None)
        planner._learn()
    drafting = [bool(p.probe and p.depth) for p in plans]
    starts = [i for i, d in enumerate(drafting) if d and (i == 0 or not drafting[i - 1])]
    assert all(drafting[i:i + PROBE_STEPS] == [True] * PROBE_STEPS for i in starts[:-1])
    return (np.diff(starts) - (PROBE_STEPS - 1)).tolist(), max(p.gain for p in plans)


def test_probes_back_off_longest_while_drafting_is_far_from_paying():
    """While plain decoding pays, each probe that finds no gain doubles the interval to the next: up to
    BACKOFF times `probe_every` when the probe measured drafting near paying, up to BACKOFF_FAR times when
    it measured it more than FAR below plain decoding (a probe there costs several AR steps and has little
    to find), and then the next one waits BACKOFF intervals at once; a far planner whose probe measures
    drafting near paying again goes back to the shorter interval. (Here drafting steps realise their plans:
    what they measure is what was predicted.)"""
    every = 2
    near, far = StepPlanner(MAX_DEPTH, online=False, probe_every=every), StepPlanner(MAX_DEPTH, online=False,
                                                                                     probe_every=every)
    for planner, rate in ((near, 0.4), (far, 0.1)):
        planner.start(knee_cost(6, 1e-3))
        planner.depths = RecordingDepths(rate)
    steps = 4 * every * BACKOFF_FAR
    (near_gaps, near_gain), (far_gaps, far_gain) = probe_gaps(near, steps), probe_gaps(far, steps)
    assert 1 - FAR <= near_gain < 1 + MARGIN and 0 < far_gain < 1 - FAR  # both decode plainly
    assert max(near_gaps) == every * BACKOFF and near_gaps[-3:] == [every * BACKOFF] * 3
    assert max(far_gaps) == every * BACKOFF_FAR and far_gaps[-2:] == [every * BACKOFF_FAR] * 2
    assert near_gaps[:3] == [2 * every, 4 * every, 8 * every]
    assert far_gaps[:3] == [BACKOFF * every, 2 * BACKOFF * every, 4 * BACKOFF * every]
    far.depths = RecordingDepths(0.4)  # drafting comes near paying: the next probe shortens the interval
    assert max(probe_gaps(far, steps)[0][1:]) == every * BACKOFF


def test_after_a_probe_drafting_resumes_at_half_the_margin():
    """A probe's steps paid the resume's catch-up: the plan right after it weighs drafting on, at half the
    margin, while the plans between probes need the whole margin to start drafting."""
    cost = knee_cost(6, 1e-3)
    _, speedup = brute_force(cost, FixedDepths(0.7))
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=4, margin=1.5 * (speedup - 1))  # 1 + m/2 < R < 1 + m
    planner.start(cost)
    planner.depths = FixedDepths(0.7)
    planner.state.drafting = False
    plans = [planner.plan() for _ in range(3 + PROBE_STEPS)]
    assert [p.depth > 0 for p in plans] == [False] * 3 + [True] * PROBE_STEPS and all(p.probe for p in plans[3:])
    plan = planner.plan()
    assert plan.depth > 0 and not plan.probe and planner.state.drafting


def drive(planner: StepPlanner, steps: int, quick: bool, rng: np.random.Generator) -> list[tuple]:
    """`steps` steps through a supplier that asks `quick_plain` first (quick) or always `plan`, each step
    recorded with a noisy measured time (the same draws both ways: a plain step's around the profile's AR
    step, a drafting step's around its plan's); returns each step's depth, probe and context."""
    seen, ar = [], planner.costs.model.ar_step
    for i in range(steps):
        noise = float(rng.uniform(0.9, 1.1))
        if quick and planner.quick_plain():
            plan = planner._plan
        else:
            plan = planner.plan(context=100.0 + i)
        seen.append((plan.depth, plan.probe, planner.context))
        if plan.depth:
            planner.record(StepRecord(8, np.array([plan.length]), 0.2 * plan.seconds * noise, 0.0,
                                      0.8 * plan.seconds * noise, 0.0),
                           TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
        else:
            planner.record(StepRecord(1, np.array([1.0]), 1e-5, 0.0, ar * noise, 1e-5), None)
    planner.report()
    return seen


def test_quick_plain_steps_plan_and_learn_what_full_plans_would():
    """A supplier that asks `quick_plain` before `plan` (every planned supplier does) takes the same steps
    as one that always calls `plan`: the same depths, probes and contexts, and the planner learns the same
    (c_T, the probe schedule, the reported totals), while most plain steps were planned without a full plan
    and their learning ran in one go at the next one."""
    cost = knee_cost(6, 1e-3)
    runs = []
    for quick in (False, True):
        planner = StepPlanner(MAX_DEPTH, probe_every=4)
        planner.start(cost)
        planner.depths = RecordingDepths(0.1)  # drafting does not pay: plain steps, quiet ones, probes
        calls = 0
        if quick:
            original = planner.plan

            def counted(*args, **kwargs):
                nonlocal calls
                calls += 1
                return original(*args, **kwargs)
            planner.plan = counted
        seen = drive(planner, 300, quick, np.random.default_rng(0))
        s = planner.state
        runs.append((seen, planner.costs.ar(None), s.since_probe, s.backoff, s.quiet, planner.report().to_dict(),
                     calls))
    (full, *full_state, _), (fast, *fast_state, calls) = runs
    assert fast == full and fast_state == full_state
    plain = sum(1 for depth, *_ in full if depth == 0)
    assert plain > 100 and any(probe for _, probe, _ in full)
    assert len(full) - calls > plain / 2  # most plain steps skipped the full plan
