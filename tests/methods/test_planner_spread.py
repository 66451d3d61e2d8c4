"""The step planner in a batch: a batch waits for its slowest row, and the planner prices that spread (measured
per batch size, aged by calls that do not draft, predicted for batch sizes not measured yet)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specdec.planner import MARGIN, StepPlanner, StepRecord, TreeFacts
from specdec.spread import (SPREAD_DEVIATION, SPREAD_MIN_STEPS, SPREAD_PRIOR_CALLS, SPREAD_WEIGHT, CallTokens, by_cap,
                            in_call, shapes)
from tests.methods.test_planner import MAX_DEPTH, FixedDepths, RecordingDepths, brute_force, knee_cost


def run_call(planner, cost, steps):
    """One generate call of hand-set steps: each (active rows [B] bool, tokens per active row); every step
    drafts (the test checks the plans) and takes its planned seconds."""
    planner.start(cost)
    for active, tokens in steps:
        plan = planner.plan(backlog=1)
        assert plan.depth > 0
        step = StepRecord(8, np.asarray(tokens, dtype=np.float64), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds,
                          0.0, active=np.asarray(active))
        planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
    return planner.report()


@pytest.mark.parametrize("rows", ["diverging", "even", "single"])
def test_a_batch_waits_for_its_slowest_row_and_the_planner_prices_it(rows):
    """Two rows of 8 tokens. Diverging: 4 drafting steps give row 0 one token and row 1 two (row 1 is done),
    then 4 give row 0 one: the rows' means add up to 10 tokens in 8 steps, the batch moved as AR would have
    (8 steps, 8 tokens), so the spread is 0.8 and the measured speedup counts the batch's 8 tokens. A plan
    predicted 1.13x over AR (above the margin) then loses to plain decoding (0.9x). Even rows, or one row:
    the spread stays 1 and the planner goes on drafting."""
    cost = knee_cost(6, 1e-3)
    _, speedup = brute_force(cost, FixedDepths(0.5))
    assert 1 + MARGIN < speedup < 1 / 0.8  # drafting pays unless the spread is priced
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.call_spread = False  # the spread folded at the call's end; within a call: the test below
    planner.depths = RecordingDepths(0.5)
    both, first = [True, True], [True, False]
    steps = {"diverging": [(both, [1, 2])] * 4 + [(first, [1])] * 4,
             "even": [(both, [2, 2])] * 4,
             "single": [([True], [2])] * 4}[rows]
    stats = run_call(planner, cost, steps)
    mean_tokens = sum(float(np.mean(t)) for _, t in steps)
    assert stats.measured_tokens == pytest.approx(mean_tokens)
    # the drafting steps per measured call, which `in_call` scales its expectation by (one row: none measured)
    assert planner.state.call_steps == {"diverging": 8, "even": 4, "single": 0}[rows]
    if rows == "diverging":
        assert stats.batch_tokens == 8 and planner.state.spread == pytest.approx(0.8)
        assert stats.measured_speedup == pytest.approx(stats.ar_seconds_measured * 0.8 / stats.seconds_measured)
    else:
        assert stats.batch_tokens == 8 and planner.state.spread == 1.0
        assert stats.measured_speedup == pytest.approx(stats.ar_seconds_measured / stats.seconds_measured)
    planner.start(cost)
    plan = planner.plan(backlog=1)
    while plan.depth == 0 and plan.probe:  # re-measuring c_T after a drafting run (its own test): not a decision
        planner.record(StepRecord(1, np.ones(len(steps[0][0])), 0.0, 0.0, cost.ar_step, 0.0), None)
        plan = planner.plan(backlog=1)
    assert (plan.depth > 0) == (rows != "diverging")


def test_root_only_drafting_steps_do_not_dilute_the_spread():
    """A drafting step whose tree ended root-only (width 1: no child passed) moves every row by one token,
    as a plain step does, and has no spread to measure: the diverging call's spread is 0.8 with or without
    six such steps in it (counted, they lifted it to 0.87, and a call of nothing else measured 1.0)."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.call_spread = False  # the spread folded at the call's end; within a call: the test below
    planner.depths = RecordingDepths(0.5)
    both, first = [True, True], [True, False]
    planner.start(cost)
    for width, active, tokens in [(1, both, [1, 1])] * 6 + [(8, both, [1, 2])] * 4 + [(8, first, [1])] * 4:
        plan = planner.plan(backlog=1)
        assert plan.depth > 0
        step = StepRecord(width, np.asarray(tokens, dtype=np.float64), 0.2 * plan.seconds, 0.0,
                          0.8 * plan.seconds, 0.0, active=np.asarray(active))
        planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (width,), backlog=1))
    stats = planner.report()
    assert stats.steps_drafted == 14 and stats.batch_tokens == 14
    assert planner.state.spread == pytest.approx(0.8)


def plain_call(planner, cost, rows: int, steps: int = 6):
    """One generate call whose steps all decode plainly (no tree facts), whatever was planned."""
    planner.start(cost)
    for _ in range(steps):
        planner.plan(backlog=1)
        planner.record(StepRecord(1, np.ones(rows), 0.0, 0.0, cost.ar_step, 0.0), None)
    return planner.report()


def test_calls_that_do_not_draft_age_the_spread_toward_one():
    """A spread measured once must not stand for as long as the planner decodes plainly (it would keep a
    paying plan below the margin for good): each call that drafted too little to measure it moves it a
    call's weight toward 1; a drafting call that measures 0.8 again pulls it back down. Batch 1: always 1."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.call_spread = False  # the spread folded at the call's end; within a call: the test below
    planner.depths = RecordingDepths(0.5)
    both, first = [True, True], [True, False]
    diverging = [(both, [1, 2])] * 4 + [(first, [1])] * 4
    run_call(planner, cost, diverging)
    assert planner.state.spread == pytest.approx(0.8)
    spreads = []
    for _ in range(4):
        plain_call(planner, cost, rows=2)
        spreads.append(planner.state.spread)
    assert spreads == pytest.approx([0.8 ** ((1 - SPREAD_WEIGHT) ** n) for n in range(1, 5)])
    assert spreads[-1] > 0.92
    run_call(planner, cost, diverging)
    assert planner.state.spread < spreads[-1] - 0.03
    single = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    plain_call(single, cost, rows=1)
    assert single.state.spread == 1.0


def test_a_batch_size_not_measured_yet_takes_the_spread_the_measured_ones_predict():
    """A batch waits for its slowest row, so its spread falls with the batch size: measured 0.8 at batch 2
    (a per-row deviation of 0.25 / e2), batch 4 (never measured) is predicted 1 / (1 + deviation * e4), where
    e_B is the expected maximum of B standard normal draws and the deviation is that measurement's beside the
    prior SPREAD_DEVIATION (SPREAD_PRIOR_CALLS calls), and drafting's gain there (1.13x over AR before the
    spread) falls below the margin, where a spread assumed to be 1 would draft. Batch 1 stays at 1; a batch
    size's own measurement replaces the prediction; a batch size met before any was measured takes the
    prior's prediction, and the measured ones' once they are."""
    cost = knee_cost(6, 1e-3)
    _, speedup = brute_force(cost, FixedDepths(0.5))
    e = {b: float(np.mean(np.max(np.random.default_rng(b).standard_normal((400_000, b)), axis=1))) for b in (2, 4)}
    deviation = (SPREAD_PRIOR_CALLS * SPREAD_DEVIATION + 0.25 / e[2]) / (SPREAD_PRIOR_CALLS + 1)
    want = 1 / (1 + deviation * e[4])
    assert speedup * want < 1 + MARGIN / 2 < 1 + MARGIN < speedup  # drafting pays unless the spread is priced
    at = {b: replace(cost, batch_size=b) for b in (1, 2, 4, 8)}  # one profile per batch size, as a server holds
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.depths = RecordingDepths(0.5)
    planner.start(at[4])  # met first, nothing measured yet: the prior's
    assert planner.state.spread == pytest.approx(1 / (1 + SPREAD_DEVIATION * e[4]), abs=0.01)
    both, first = [True, True], [True, False]
    planner.depths = RecordingDepths(0.9)  # batch 2 drafts (at 0.5 its prior spread, 0.9, would not)
    run_call(planner, at[2], [(both, [1, 2])] * 4 + [(first, [1])] * 4)
    assert planner.state.spread == pytest.approx(0.8)
    planner.depths = RecordingDepths(0.5)
    planner.start(at[4])
    assert planner.state.spread == pytest.approx(want, abs=0.01)  # Blom's approximation of e_B
    assert planner.plan(backlog=1).depth == 0
    planner.start(at[8])  # a new batch size: predicted, not copied from batch 2 or 4
    assert planner.state.spread < want
    planner.start(at[1])
    assert planner.state.spread == 1.0 and planner.plan(backlog=1).depth > 0
    planner.depths = RecordingDepths(0.9)  # drafting pays by far: batch 8 drafts despite its predicted spread
    run_call(planner, at[8], [([True] * 8, [2] * 8)] * 4)  # and measures rows that move alike: its own 1.0 stands
    planner.start(at[8])
    assert planner.state.spread == 1.0


def test_a_caps_shape_is_the_spread_of_its_accepted_tokens():
    """shapes: sd(a) / sqrt(1 + E[a]) for each cap, from the depth rates (0 where a row always accepts the whole
    cap); by_cap: a spread measured at one shape, its shortfall 1 / spread - 1 scaled by each cap's shape."""
    assert shapes([1.0, 1.0, 1.0]).tolist() == [0.0, 0.0, 0.0]
    got = shapes([1.0, 0.5, 0.5])  # cap 1: a = 0 or 1, at 1/2 each; cap 2: a = 0, 1, 2 at 1/2, 1/4, 1/4
    assert got[1] == pytest.approx(0.5 / np.sqrt(1.5))
    assert got[2] == pytest.approx(np.sqrt(1.25 - 0.75 ** 2) / np.sqrt(1.75))
    deep = shapes([1.0] + [0.9] * 6)
    assert deep[0] == 0.0 and np.all(np.diff(deep) > 0)  # deeper caps spread more
    assert by_cap(0.8, 0.0, deep).tolist() == [0.8] * 7  # no shape measured yet: one spread for every cap
    assert by_cap(1.0, deep[3], deep).tolist() == [1.0] * 7
    spread = by_cap(0.8, deep[3], deep)
    assert spread[3] == pytest.approx(0.8) and np.all(np.diff(spread[1:]) < 0)
    assert 1 / spread[6] - 1 == pytest.approx(0.25 * deep[6] / deep[3])


def test_each_cap_is_priced_at_its_own_spread():
    """A call that measured a spread of 0.8: the planner keeps the mean shape of the caps it drafted, and its
    next plan weighs each cap at that spread scaled by the cap's own shape (`by_cap`), choosing the cap of the
    most batch tokens per second, not the most row tokens per second."""
    cost = knee_cost(6, 1e-4)  # verification nearly flat past 6 nodes: rows' tokens a second peak at cap 5
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.depths = RecordingDepths(0.9)
    cap_shapes = shapes(planner.depths.estimates().rate)
    both, first = [True, True], [True, False]
    planner.start(cost)
    drafted = []
    for active, tokens in [(both, [1, 2])] * 4 + [(first, [1])] * 4:
        plan = planner.plan(backlog=1)
        assert plan.depth > 0 and plan.shape == pytest.approx(cap_shapes[plan.depth])
        drafted.append(plan.shape)
        step = StepRecord(8, np.asarray(tokens, dtype=np.float64), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds,
                          0.0, active=np.asarray(active))
        planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
    planner.report()
    assert planner.state.spread == pytest.approx(0.8) and planner.state.shape == pytest.approx(np.mean(drafted))
    planner.start(cost)
    plan = planner.plan(backlog=1)
    while plan.depth == 0 and plan.probe:  # re-measuring c_T after a drafting run: not a decision
        planner.record(StepRecord(1, np.ones(2), 0.0, 0.0, cost.ar_step, 0.0), None)
        plan = planner.plan(backlog=1)
    length, seconds = planner.predict(1, None)
    batch = length / seconds * by_cap(0.8, planner.state.shape, cap_shapes)
    rows = length / seconds * 0.8
    best = max(range(1, MAX_DEPTH + 1), key=batch.__getitem__)
    assert best < max(range(1, MAX_DEPTH + 1), key=rows.__getitem__)  # the spread by cap moves the choice
    assert plan.gain == pytest.approx(batch[best] * seconds[0]) and plan.gain > 1 + MARGIN
    assert plan.depth == best


def call_of(steps):
    """CallTokens after drafting steps given as (active rows, tokens per active row)."""
    call = CallTokens()
    for active, tokens in steps:
        tokens = np.asarray(tokens, dtype=np.float64)
        call.add(tokens, np.asarray(active), float(tokens.mean()), drafted=True)
    return call


def test_a_call_s_own_rows_move_its_spread():
    """`in_call`: a call whose rows diverge for good reads below its batch size's spread (a factor < 1), one
    whose rows keep together above it; the per-step draws' share is expected (at the same spread a call that
    has drafted fewer steps is expected to read lower), a finished row is no slow row, and before
    SPREAD_MIN_STEPS drafting steps there is no evidence."""
    both = [True, True]
    apart = call_of([(both, [2, 4])] * 8)
    together = call_of([(both, [3, 3])] * 8)
    assert in_call(0.85, 16, apart) < 0.95 and in_call(0.85, 16, together) > 1.0
    assert in_call(0.85, 16, call_of([(both, [3, 3])] * 3)) == 1.0  # fewer than SPREAD_MIN_STEPS
    assert SPREAD_MIN_STEPS <= 8
    # the same reading counts for more early in a call (the draws' expected shortfall is larger then)...
    assert in_call(0.85, 64, apart) > in_call(0.85, 8, apart)
    # ... and a row that finished stops counting: the rows still decoding kept together
    done = call_of([([True] * 3, [3, 3, 3])] * 4 + [([True, True, False], [3, 3])] * 4)
    assert in_call(0.85, 16, done) > 1.0
    assert in_call(0.85, 16, call_of([([True], [3])] * 8)) == 1.0  # one row: nothing to spread


@pytest.mark.parametrize("rows", ["apart", "together"])
def test_the_planner_weighs_its_call_s_rows(rows):
    """Drafting pays by ~13% at a spread of 1 (the batch size's). A call whose rows drift apart (one gets 1
    token a step, the other 3) turns plain within it; one whose rows keep together drafts to its end."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, online=False, realise=False, probe_every=1000)
    planner.depths = RecordingDepths(0.5)
    planner.start(cost)
    depths = []
    for _ in range(16):
        plan = planner.plan(backlog=1)
        depths.append(plan.depth)
        if plan.depth == 0:
            planner.record(StepRecord(1, np.ones(2), 0.0, 0.0, cost.ar_step, 0.0), None)
            continue
        tokens = [1.0, 3.0] if rows == "apart" else [2.0, 2.0]
        planner.record(StepRecord(8, np.asarray(tokens), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds, 0.0),
                       TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
    if rows == "apart":
        assert depths[0] > 0 and 0 in depths[SPREAD_MIN_STEPS:12], depths
    else:
        assert all(d > 0 for d in depths), depths
