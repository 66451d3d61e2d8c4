"""The step planner: its depth cap equals the brute-force argmax on hand-built cost curves, and it decides
between drafting and plain steps by what it measured (its online costs: test_online_costs.py; the batch's
spread: test_planner_spread.py; its probes: test_planner_probes.py; its realised rate:
test_planner_realised.py)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specdec.cost import CostModel, Curve
from specdec.estimates import Estimates
from specdec.online_costs import C_T_FIRST, OnlineCosts
from specdec.planner import (BACKOFF, C_T_AGREEING, C_T_DOUBT, C_T_EVERY, C_T_STRETCH, COLD_PROBE, EVIDENCE_ROWS, FAR,
                             FAR_ROWS, MARGIN, PROBE_STEPS, REPLAN_EVERY, REPLAN_FAR, WARM_AFTER, WARMUP,
                             WARMUP_EVIDENCE, Plan, StepPlanner, StepRecord, TreeFacts)
from tests.helpers import make_cost, step_record

MAX_DEPTH = 7
WIDTHS = np.array([1, 3, 6, 10, 15, 21, 28, 36], dtype=np.float64)  # the tree's padded width with cap D
FORWARDS = np.array([0, 0, 1, 2, 3, 4, 5, 6], dtype=np.float64)  # layer forwards with cap D (depth 1: catch-up)


class FixedDepths:
    """Acceptance and growth by depth held fixed (what `DepthStats` would have learned)."""

    def __init__(self, rate: float):
        s = np.cumprod(np.full(MAX_DEPTH, rate))
        self.steps = 100  # past the warm-up probes
        self._e = Estimates(np.concatenate([[1.0], 1.0 + np.cumsum(s)]), [1.0] + [rate] * MAX_DEPTH,
                            [1.0] + [rate] * MAX_DEPTH, FORWARDS, WIDTHS, 1.0)

    def estimates(self) -> Estimates:
        return self._e


def knee_cost(knee: int, jump: float) -> CostModel:
    """Verification flat at 5 ms up to `knee` nodes, then `jump` seconds more per node; an AR step of 4 ms
    (3.5 ms forward, 0.5 ms loop); draft layer 0.3 ms, catch-up 0.4 ms."""
    base = make_cost(ar_step=4e-3, loop=5e-4, layer=3e-4, catch_up=4e-4)
    x = sorted({1.0, 2.0, float(knee), 64.0})
    seconds = [3.5e-3 if n == 1 else 5e-3 + jump * max(n - knee, 0.0) for n in x]
    return replace(base, use_fit=False, verify_points=Curve.through(x, seconds))


def costly_prompt(cost: CostModel) -> CostModel:
    """`cost` with a catch-up that grows 0.5 ms a token: over a 64-token prompt it costs about 8 AR steps."""
    return replace(cost, catch_up=Curve((1.0, 64.0), (4e-4, 4e-4 + 63 * 5e-4)))


def brute_force(cost: CostModel, depths: FixedDepths) -> tuple[int, float]:
    """argmax over D of L(D) c_T / C(D), each C(D) priced part by part through the cost model's API."""
    e = depths.estimates()
    rates = [1.0] + [cost.speedup(e.length[d], cost.step_seconds(int(WIDTHS[d]), backlog=1, layers=FORWARDS[d]))
                     for d in range(1, MAX_DEPTH + 1)]
    best = int(np.argmax(rates[1:])) + 1
    return best, rates[best]


def test_depth_cap_is_the_brute_force_argmax():
    chosen = []
    for rate, knee in ((r, k) for r in (0.4, 0.7, 0.9) for k in (2, 3, 6, 10, 15, 21, 28, 36)):
        for jump in (2e-4, 1e-3, 5e-3):
            cost = knee_cost(knee, jump)
            planner = StepPlanner(MAX_DEPTH, online=False)
            planner.start(cost)
            planner.depths = FixedDepths(rate)
            plan = planner.plan(backlog=1)
            best, speedup = brute_force(cost, planner.depths)
            # A planner that starts drafting goes on while the best plan beats AR by half the margin.
            want = best if speedup > 1 + MARGIN / 2 else 0
            assert plan.depth == want, (rate, knee, jump, speedup)
            assert plan.seconds == pytest.approx(cost.ar_step if want == 0 else cost.step_seconds(
                int(WIDTHS[want]), backlog=1, layers=FORWARDS[want]))
            chosen.append(plan.depth)
    assert len(set(chosen)) >= 4  # the knees and rates moved the choice, plain decoding (0) included


def test_plain_decoding_needs_the_full_margin_to_start_drafting():
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, online=False)
    planner.start(cost)
    planner.depths = FixedDepths(0.7)
    _, speedup = brute_force(cost, planner.depths)
    assert speedup > 1 + MARGIN  # drafting pays: the planner drafts ...
    assert planner.plan().depth > 0
    planner.state.drafting = False  # ... but had it been decoding plainly, it needs speedup > 1 + margin
    strict = StepPlanner(MAX_DEPTH, online=False, margin=speedup - 1 + 1e-3)
    strict.start(cost)
    strict.depths = FixedDepths(0.7)
    strict.state.drafting = False
    assert strict.plan().depth == 0


def test_ar_step_follows_the_context_and_a_cold_draft_is_not_probed():
    model = replace(make_cost(ar_step=4e-3, loop=5e-4), context_slope=1e-3)  # +0.1% per token past 512
    costs = OnlineCosts(model)
    assert costs.ar(256) == pytest.approx(4e-3 * (1 - 0.256)) and costs.ar(None) == 4e-3
    for _ in range(60):  # plain steps at context 1012 taking 1.5x the profiled step: c_T at 512 stays 4 ms
        costs.observe_ar(step_record(1, 6e-3), 1012, warm=True)
    assert costs.ar_step == pytest.approx(4e-3, rel=0.01)
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=4)
    cost = costly_prompt(knee_cost(2, 5e-3))
    planner.start(cost)
    planner.depths = FixedDepths(0.4)  # plain decoding wins, but drafting is not hopeless: probes are due
    depths = [planner.plan(backlog=64, cold=True).depth for _ in range(12)]
    assert depths == [0] * 12  # a probe would pay the draft's whole prompt prefill, about 8 plain steps
    probes = [planner.plan(cold=False).probe for _ in range(12)]
    first = probes.index(True)  # a warm draft is probed: PROBE_STEPS drafting steps in a row
    assert probes[first:first + PROBE_STEPS] == [True] * PROBE_STEPS
    # but a planner that turned plain still probes now and then, though every call starts with a cold draft
    planner.start(cost)  # a new call: no probe runs on into it
    probes = [planner.plan(backlog=64, cold=True).probe for _ in range(4 * BACKOFF + PROBE_STEPS)]
    assert sum(probes) == PROBE_STEPS
    # A cold draft whose catch-up costs less than COLD_PROBE plain steps is probed like a warm one.
    planner.start(knee_cost(2, 5e-3))
    assert any(planner.plan(backlog=64, cold=True).probe for _ in range(12))


@pytest.mark.parametrize("case", ["hopeless", "cold", "near"])
def test_plain_decoding_weighs_the_plan_only_every_few_steps(case, monkeypatch):
    """While plain decoding pays and no probe is due (drafting hopeless; or the draft cold in this call, so
    probes wait; or probes far apart), a full plan runs once per REPLAN_EVERY steps, or once per REPLAN_FAR
    while the last one put drafting more than FAR below plain decoding: a plain step should cost what an
    AR step costs, not the planner's host work on top of it. Whether a step asks `quick_plain` first or
    `plan` alone, the same full plans run."""
    backlog, cold = 64, case == "cold"
    if case == "hopeless":  # a layer costs more than a whole AR step: no tree could ever pay
        cost, rate = make_cost(ar_step=4e-3, loop=5e-4, layer=5e-3, catch_up=5e-3), 0.9
    elif case == "cold":
        cost, rate = costly_prompt(knee_cost(2, 5e-3)), 0.4
    else:  # drafting a few percent short of paying
        cost, rate, backlog = knee_cost(6, 1e-3), 0.35, 1
    every = REPLAN_EVERY if case == "near" else REPLAN_FAR
    for quick in (False, True):
        planner = StepPlanner(MAX_DEPTH, online=False, probe_every=100 * REPLAN_FAR)
        planner.start(cost)
        planner.depths = FixedDepths(rate)
        calls = []
        predict = planner.predict
        monkeypatch.setattr(planner, "predict", lambda *a: calls.append(1) or predict(*a))
        steps = 4 * REPLAN_FAR
        plans = [None if quick and planner.quick_plain() else planner.plan(backlog=backlog, cold=cold)
                 for _ in range(steps)]
        assert all(p is None or p.depth == 0 for p in plans)
        assert len(calls) == steps // every
        gains = [p.gain for p in plans if p is not None and p.gain]  # the full plans' weighed gains
        assert len(gains) == len(calls) and all((1 - FAR <= g) == (case == "near") for g in gains)


def test_a_calls_first_plans_come_every_few_steps_while_its_c_t_is_measured(monkeypatch):
    """A call's first warm plain steps measure c_T (its first plan priced plain steps at the c_T it started
    with): until they have, full plans come every REPLAN_EVERY steps even where drafting is far from
    paying, then every REPLAN_FAR; the next call, started in the middle of a quiet stretch, plans its first
    step in full and weighs its own measurement REPLAN_EVERY steps later. Between full plans every step is a
    quick one."""
    cost = make_cost(ar_step=4e-3, loop=5e-4, layer=5e-3, catch_up=5e-3)  # drafting hopeless
    planner = StepPlanner(MAX_DEPTH, probe_every=1000)
    planner.depths = FixedDepths(0.9)
    predict = planner.predict
    for call, seconds in enumerate((1.3 * 4e-3, 0.8 * 4e-3)):
        planner.start(cost)
        full, plans = [], 0
        for step in range(2 * REPLAN_FAR + 4):
            monkeypatch.setattr(planner, "predict", lambda *a, step=step: full.append(step) or predict(*a))
            if not planner.quick_plain():
                plans += 1
                assert planner.plan(backlog=1).depth == 0
            planner.record(step_record(1, seconds), None)
        # the second call starts where the first call's last full plan left a quiet stretch of REPLAN_FAR steps
        assert full[:3] == [0, REPLAN_EVERY, REPLAN_EVERY + REPLAN_FAR]
        assert plans == len(full)
        planner.report()
        assert planner.costs.ar(None) == pytest.approx(seconds)  # measured


class RecordingDepths(FixedDepths):
    """FixedDepths that accepts the planner's records (and learns nothing from them)."""

    def record(self, facts, accepted, row_depth=None) -> None:
        pass


@pytest.mark.parametrize("rate, slower, sure", [(0.7, 1.0, False), (0.9, 1.5, True)])
def test_a_planner_that_always_drafts_re_measures_c_t_with_a_few_plain_steps(rate, slower, sure):
    """Drafting every step measures no plain step: after WARMUP drafting steps the planner takes
    WARM_AFTER + C_T_FIRST plain steps (c_T the median of the last C_T_FIRST: the first ones run cold), then
    as many every C_T_EVERY drafting steps (C_T_FIRST more members of c_T's window), or every C_T_STRETCH
    times C_T_EVERY while a c_T C_T_DOUBT lower would still leave drafting paying (there the plain steps
    only cost: the decision does not hinge on c_T)."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, probe_every=1000)
    planner.start(cost)
    planner.depths = RecordingDepths(rate)
    every = C_T_EVERY * (C_T_STRETCH if sure else 1)
    depths, gains, first_probe = [], [], WARM_AFTER + C_T_FIRST
    for _ in range(WARMUP + first_probe + every + first_probe + 1):  # one drafting step learns the last
        plan = planner.plan(backlog=1)
        depths.append(plan.depth)
        if plan.depth:
            gains.append(plan.gain)
            # verification as profiled (its level stays 1)
            step = StepRecord(8, np.array([plan.length]), 0.2 * plan.seconds, 0.0, cost.verify_seconds(8), 0.0)
            planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
        else:  # plain steps take `slower` times the profiled c_T; one of the first probe's warm steps stalls
            assert plan.probe
            stalled = len(depths) == WARMUP + WARM_AFTER + 2
            planner.record(step_record(1, 5 * cost.ar_step if stalled else slower * cost.ar_step), None)
    plain = [i for i, d in enumerate(depths) if d == 0]
    second = WARMUP + first_probe + every
    assert plain == list(range(WARMUP, WARMUP + first_probe)) + list(range(second, second + first_probe))
    assert planner.costs.ar_seen == 2 * C_T_FIRST and planner.costs.ar(None) == pytest.approx(slower * cost.ar_step)
    steady = gains[WARMUP:]  # the plans weighed at the measured c_T: the regime the case names
    assert all((g * (1 - C_T_DOUBT) > 1 + MARGIN / 2) == sure and g > 1 + MARGIN for g in steady)


@pytest.mark.parametrize("speeds, doubling", [((1.0,), True), ((1.0, 1.12), False)])
def test_c_t_probes_come_less_often_while_they_find_c_t_where_it_was(speeds, doubling):
    """Where the gain is not sure (C_T_DOUBT), each c_T probe whose measurement agrees with c_T (within C_T_AGREE)
    doubles the drafting steps before the next, up to C_T_AGREEING times (at most C_T_STRETCH x C_T_EVERY); one that disagrees (plain steps now 12% slower, now back) restarts the
    count: every probe then comes C_T_EVERY drafting steps after the last. (The first measurement has no c_T
    of its own to agree with.)"""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, probe_every=10_000)
    planner.start(cost)
    planner.depths = RecordingDepths(0.7)  # drafting pays, not by enough to stretch the interval (C_T_DOUBT)
    probe_steps = WARM_AFTER + C_T_FIRST
    runs, drafted, plain, probes = [], 0, 0, 0
    while len(runs) < C_T_AGREEING + 3:
        plan = planner.plan(backlog=1)
        if plan.depth:
            drafted += 1
            step = StepRecord(8, np.array([plan.length]), 0.2 * plan.seconds, 0.0, cost.verify_seconds(8), 0.0)
            planner.record(step, TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
            continue
        assert plan.probe
        if drafted:
            runs.append(drafted)
            drafted = 0
        speed = speeds[probes % len(speeds)]
        planner.record(step_record(1, speed * cost.ar_step), None)
        plain += 1
        if plain == probe_steps:
            plain, probes = 0, probes + 1
    later = [C_T_EVERY * 2 ** min(i, C_T_AGREEING) for i in range(len(runs) - 1)] if doubling else \
        [C_T_EVERY] * (len(runs) - 1)
    assert runs == [WARMUP] + later


def test_each_call_measures_c_t_afresh_when_it_runs_at_another_speed():
    """c_T is a window of C_T_WINDOW plain steps carried from call to call; a call whose plain steps run at
    another speed than the last one's (Spec-Bench batch 4 on the 2-core CPU: 15-17 ms for one batch, 19-21
    for the others) has its first C_T_FIRST warm steps restart it, where the window took half a call to
    follow. A call at the same speed leaves the window as it was."""
    cost = knee_cost(6, 1e-3)
    planner = StepPlanner(MAX_DEPTH, probe_every=1000)
    planner.depths = FixedDepths(0.05)  # drafting never pays: plain steps throughout

    def call(seconds: float, steps: int) -> None:
        planner.start(cost)
        for _ in range(steps):
            assert planner.plan(backlog=1).depth == 0
            planner.record(step_record(1, seconds), None)
        planner.report()

    call(cost.ar_step, 40)
    assert planner.costs.ar(None) == pytest.approx(cost.ar_step)
    call(1.1 * cost.ar_step, WARM_AFTER + C_T_FIRST)  # within C_T_RESET: members of the window, c_T as it was
    assert planner.costs.ar(None) == pytest.approx(cost.ar_step)
    call(0.6 * cost.ar_step, WARM_AFTER + C_T_FIRST)  # faster: c_T is this call's after its first warm steps
    assert planner.costs.ar(None) == pytest.approx(0.6 * cost.ar_step)


def test_tested_nodes_of_one_row_match_the_batched_walk():
    """`tested_nodes` at batch 1 walks the tree in Python; on random trees and verdicts (paths that end inside
    the tree, at a leaf, or on a token no child holds) it marks the same nodes as the numpy walk."""
    from specdec.estimates import _tested_one, _tested_rows

    rng = np.random.default_rng(3)
    for case in range(300):
        T = int(rng.integers(1, 40))
        n = int(rng.integers(1, T + 1))
        parents = np.full((1, T), -1, dtype=np.int64)
        tokens = np.zeros((1, T), dtype=np.int64)
        for i in range(1, n):
            parents[0, i] = int(rng.integers(0, i))
            used = {int(tokens[0, j]) for j in range(1, i) if parents[0, j] == parents[0, i]}
            tokens[0, i] = int(rng.choice([t for t in range(12) if t not in used]))
        path, node = [], 0
        while len(path) < 8:
            children = [i for i in range(1, n) if parents[0, i] == node]
            if not children or rng.random() < 0.2:
                path.append(int(rng.integers(0, 12)))  # the target's own token: maybe no child holds it
                break
            node = int(rng.choice(children))
            path.append(int(tokens[0, node]))
        accepted = np.array([path + [0] * (9 - len(path))], dtype=np.int64)
        num_accepted = np.array([int(rng.integers(0, len(path) + 1))])
        args = (tokens, parents, np.array([n]), accepted, num_accepted)
        for got, want in zip(_tested_one(*args), _tested_rows(*args)):
            assert np.array_equal(got, want), case


class CountingDepths(RecordingDepths):
    """RecordingDepths before the warm-up: counts the drafting steps recorded, as `DepthStats` does."""

    def __init__(self, rate: float):
        super().__init__(rate)
        self.steps = 0

    def record(self, facts, accepted, row_depth=None) -> None:
        self.steps += 1


def best_cap(planner) -> int:
    """The cap a plan at backlog 1 weighs best: the highest predicted tokens per second (no catch-up to amortise)."""
    length, seconds = planner.predict(1, None)
    return max(range(1, len(length)), key=lambda d: length[d] / seconds[d])


def test_warm_up_probes_skip_a_costly_cold_prompt_where_plain_decoding_is_predicted_to_win():
    """The first WARMUP drafting steps of a planner probe at the best cap, to calibrate it, even where its prior
    says plain decoding wins (the prior's acceptance is a guess: one probe per full plan then). Not when such
    a probe would pay a cold draft's whole prompt prefill, about 8 plain steps: there, and only there, probes
    come when due."""
    paying = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    paying.start(costly_prompt(knee_cost(6, 1e-3)))
    paying.depths = FixedDepths(0.9)  # drafting predicted to pay, a 36-token prompt (4.5 plain steps) and all
    paying.depths.steps = 0  # before the warm-up
    assert paying.costs.catch_up(36) > COLD_PROBE * paying.costs.ar(None)
    plans = [paying.plan(backlog=36, cold=True) for _ in range(WARMUP)]
    assert all(p.depth > 0 and p.probe and p.warmup for p in plans)
    base = make_cost(ar_step=4e-3, loop=5e-4, layer=2.5e-3, catch_up=2.5e-3)  # a draft as slow as a target
    losing = replace(base, use_fit=False, verify_points=knee_cost(6, 1e-3).verify_points)
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    planner.start(costly_prompt(losing))
    assert not planner._hopeless(None)  # a deep chain accepted whole would pay: only the prediction says no
    assert all(planner.plan(backlog=64, cold=True).depth == 0 for _ in range(4 * WARMUP))
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    planner.start(losing)  # a warm draft (or a cheap prompt): the warm-up runs though plain decoding is predicted
    length, seconds = planner.predict(1, None)
    assert np.all(length[1:] * planner.costs.ar(None) / seconds[1:] < 1)  # every cap predicted slower than plain
    plans, best = [], []
    for _ in range(2 * REPLAN_EVERY):  # one per full plan, while plain wins
        best.append(best_cap(planner))
        plans.append(planner.plan(backlog=1))
    assert [p.depth > 0 for p in plans] == ([True] + [False] * (REPLAN_EVERY - 1)) * 2 and plans[0].probe
    assert all(p.depth == b for p, b in zip(plans, best) if p.depth)


def losing_warm_up(rows: int, steps: int) -> tuple[StepPlanner, list[Plan], list[int]]:
    """A fresh planner where a draft as slow as its target loses, its drafting steps of `rows` rows each at
    their planned speed and length, learned at once: (the planner, its `steps` plans, the best cap of each)."""
    base = make_cost(ar_step=4e-3, loop=5e-4, layer=2.5e-3, catch_up=2.5e-3)
    losing = replace(base, use_fit=False, verify_points=knee_cost(6, 1e-3).verify_points)
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=4)
    planner.start(losing)
    planner.depths = CountingDepths(0.5)
    plans, best = [], []
    for _ in range(steps):
        best.append(best_cap(planner))
        plan = planner.plan(backlog=1)
        plans.append(plan)
        if plan.depth:
            planner.record(StepRecord(8, np.full(rows, plan.length), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds,
                                      0.0), TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,),
                                                      backlog=1))
        else:
            planner.record(StepRecord(1, np.ones(rows), 0.0, 0.0, plan.seconds, 0.0), None)
        planner._learn()
    return planner, plans, best


def test_the_warm_up_waits_once_its_first_probes_say_plain_decoding_wins_by_the_margin():
    """The warm-up's first WARMUP_EVIDENCE probes (of EVIDENCE_ROWS rows at least) run however the
    prediction reads; after them, while plain decoding is predicted to win by the margin, the rest of the
    warm-up waits: plain steps, and a probe at the best cap only when one is due. Where drafting is
    predicted to pay, every warm-up probe runs (the realised-rate test above: WARMUP probes in a row)."""
    rows = EVIDENCE_ROWS  # a batch wide enough that WARMUP_EVIDENCE steps are evidence enough
    planner, plans, best = losing_warm_up(rows, 8 * REPLAN_EVERY)
    warm = [(p, b) for p, b in zip(plans, best) if p.warmup]
    assert len(warm) == WARMUP_EVIDENCE and all(p.depth == b and p.gain < 1 - MARGIN for p, b in warm)
    last = max(i for i, p in enumerate(plans) if p.warmup)
    later = [p for p in plans[last + 1:] if p.depth]
    assert later and all(p.probe and not p.warmup and p.depth < MAX_DEPTH for p in later)  # due probes, best cap
    # the warm-up measured drafting far from paying: the first due probe waits BACKOFF intervals
    assert sum(p.depth > 0 for p in plans) <= WARMUP_EVIDENCE + 2 * PROBE_STEPS  # two probes in 64 steps


def test_single_row_steps_are_too_few_to_end_the_warm_up_or_to_call_drafting_far():
    """At batch 1 a step accepts a whole number of tokens (1 to 6 on the demo pair), so a few steps say little:
    the warm-up runs until its probes measured EVIDENCE_ROWS rows, and a probe whose steady steps measured
    fewer than FAR_ROWS does not count as far from paying, so the probe interval doubles from one instead of
    jumping to BACKOFF (on the demo pair at HumanEval batch 1 five unlucky warm-up steps kept a fresh planner
    plain for ~100 steps where drafting ran 1.5x AR). The same losing draft as above, one row a step."""
    assert EVIDENCE_ROWS > WARMUP_EVIDENCE and FAR_ROWS > PROBE_STEPS - 1  # what makes batch 1 differ
    planner, plans, best = losing_warm_up(1, 8 * REPLAN_EVERY)
    warm = [(p, b) for p, b in zip(plans, best) if p.warmup]
    assert len(warm) == min(WARMUP, EVIDENCE_ROWS) and all(p.depth == b for p, b in warm)
    assert not planner.state.far and not planner.state.drafting
    # the first due probe after the warm-up: at once for one row (the interval's first multiple has passed), BACKOFF
    # intervals after the warm-up's last probe for a wide batch
    first = [next(i for i in range(last + 1, len(plans)) if plans[i].depth) - last for _, plans, _, last in
             (run + (max(i for i, p in enumerate(run[1]) if p.warmup),) for run in (
                 (planner, plans, best), losing_warm_up(EVIDENCE_ROWS, 8 * REPLAN_EVERY)))]
    assert first[0] <= planner.probe_every and first[1] >= (BACKOFF - 1) * planner.probe_every


def test_a_new_batch_size_starts_from_the_nearest_one_planned():
    """A batch size met for the first time (a server's varying batches, a prompt set's ragged last batch)
    starts from the nearest batch size already planned: its mode (plain decoding here), c_T scaled by what
    that one measured over its profile, its verify level. With none planned, from the profile. Its c_T counts
    as not measured at its own batch size: its first c_T probe comes after WARMUP drafting steps."""
    slow = make_cost(ar_step=4e-3, loop=5e-4, layer=2.5e-3, catch_up=2.5e-3)  # a draft as slow as a target
    planner = StepPlanner(MAX_DEPTH, probe_every=1000)
    planner.depths = FixedDepths(0.5)
    planner.start(replace(slow, use_fit=False, verify_points=knee_cost(6, 1e-3).verify_points, batch_size=8))
    for _ in range(40):
        assert planner.plan(backlog=1).depth == 0
        planner.record(step_record(1, 0.8 * 4e-3), None)  # plain steps faster than profiled
    planner._learn()
    learned = planner.state
    assert not learned.drafting and learned.costs.ar_step == pytest.approx(3.2e-3, rel=0.02)
    planner.start(replace(knee_cost(6, 1e-3), batch_size=2))  # a far batch size, already planned: not chosen
    planner.state.drafting = True
    six = replace(knee_cost(6, 1e-3), batch_size=6, ar_step=5e-3)
    planner.start(six)
    assert not planner.state.drafting and planner.state.costs.ar_step == pytest.approx(4e-3, rel=0.02)
    assert planner.state.costs.verify_level == learned.costs.verify_level
    assert planner.state.costs.ar_step != learned.costs.ar_step  # its own profile, scaled
    assert learned.costs.ar_seen > 0 and planner.state.costs.ar_seen == 0
    fresh = StepPlanner(MAX_DEPTH, probe_every=1000)
    fresh.start(six)
    assert fresh.state.drafting and fresh.state.costs.ar_step == 5e-3


def test_a_larger_new_batch_size_does_not_inherit_drafting():
    """Drafting pays less the larger the batch: a new batch size larger than the nearest one planned starts
    plain (its first plan needs the full margin), a smaller one keeps that one's drafting mode."""
    planner = StepPlanner(MAX_DEPTH, probe_every=1000)
    planner.start(replace(knee_cost(6, 1e-3), batch_size=4))
    planner.state.drafting = True
    planner.start(replace(knee_cost(6, 1e-3), batch_size=8))
    assert not planner.state.drafting
    planner.start(replace(knee_cost(6, 1e-3), batch_size=3))
    assert planner.state.drafting  # from batch 4, its nearest
