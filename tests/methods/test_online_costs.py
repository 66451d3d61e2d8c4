"""The step cost model corrected by the loop's timers (`specdec.online_costs.OnlineCosts`): the verify curve
in level and shape, the draft's two factors, and c_T, the unit of every plan, which ignores stalls, follows
the machine between its measurements and stays continuous when drafting resumes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specdec.cost import Curve
from specdec.estimates import TreeFacts
from specdec.online_costs import BOUND_STEPS, C_T_FIRST, C_T_RESET, C_T_WINDOW, CLIP, OnlineCosts
from tests.helpers import make_cost, step_record


def test_online_costs_follow_the_timers_in_level_and_shape():
    model = make_cost(ar_step=4e-3, loop=5e-4, layer=3e-4, catch_up=4e-4)
    costs = OnlineCosts(model)
    for _ in range(60):  # plain steps twice as slow as profiled; only warm ones count
        costs.observe_ar(step_record(1, 8e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(8e-3, rel=0.01)
    costs.observe_ar(step_record(1, 1.0), None, warm=False)
    assert costs.ar_step == pytest.approx(8e-3, rel=0.01)
    base8, base40 = model.verify_seconds(8), model.verify_seconds(40)
    for i in range(80):  # width 8 verifies as profiled, width 40 3x slower (a steeper curve); catch-ups cost 1x,
        layers = 1 + i % 4  # layers 3x (the split between them is solvable: the layer count varies)
        facts = TreeFacts(5, layers, (4,) * layers, (8,), backlog=2)
        propose = model.catch_up_seconds(2) + 3 * layers * model.draft_seconds(4)
        wide = i % 2 == 1
        costs.observe_draft(step_record(40 if wide else 8, 3 * base40 if wide else base8, propose, (3,)), facts, None, False)
    # Each width bucket's correction is shrunk toward the common level by PRIOR pseudo-steps (within 25%),
    # the shape still follows: the wide trees' correction is over twice the narrow ones'.
    assert costs.verify(8) == pytest.approx(base8, rel=0.25)
    assert costs.verify(40) == pytest.approx(3 * base40, rel=0.25)
    assert costs.verify(40) / base40 > 2 * costs.verify(8) / base8
    # The two factors are re-solved together (PRIOR pseudo-steps hold them toward the profile's 1, 1).
    assert costs.catch_factor == pytest.approx(1.0, abs=0.25) and costs.layer_factor == pytest.approx(3.0, rel=0.1)
    want = model.catch_up_seconds(2) + 3 * 2 * model.draft_seconds(4)
    assert costs.draft(2, 2, 4) == pytest.approx(want, rel=0.05)


def test_c_t_ignores_a_burst_of_stalls_and_follows_a_lasting_change():
    """c_T is the unit of every plan: a burst of stalled plain steps (a shared CPU: 40-55 ms against 12-13 at
    batch 8) must not lift it, or every drafting plan looks better by the same factor while the drafting
    prices, measured only when drafting, stay where they were. A lasting change is followed within a window."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model)
    costs.observe_ar(step_record(1, 6e-3), None, warm=True)  # the profile's value is no member: one measurement
    assert costs.ar_step == pytest.approx(6e-3)        # replaces it
    costs.observe_ar(step_record(1, 3e-2), None, warm=True)
    costs.observe_ar(step_record(1, 6e-3), None, warm=True)  # three (the first c_T probe's): one stall is rejected
    assert costs.ar_step == pytest.approx(6e-3)
    for _ in range(40):
        costs.observe_ar(step_record(1, 5e-3), None, warm=True)
    for _ in range(C_T_WINDOW // 2):  # stalled steps at 3-10x: a running mean (weight 0.15) read 2.6x
        costs.observe_ar(step_record(1, 1.5e-2 + 3.5e-2 * (_ % 2)), None, warm=True)
    assert costs.ar_step == pytest.approx(5e-3)
    for _ in range(C_T_WINDOW // 2 + 1):  # the machine slower for good: c_T follows within a window
        costs.observe_ar(step_record(1, 7e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(7e-3)
    seeded = OnlineCosts(replace(model, ar_step=8e-3))  # another batch size starts from this one's ratio
    seeded.seed(costs)
    assert seeded.ar_step == pytest.approx(14e-3)
    seeded.observe_ar(step_record(1, 10e-3), None, warm=True)
    seeded.observe_ar(step_record(1, 10e-3), None, warm=True)
    assert seeded.ar_step == pytest.approx(10e-3)


def test_c_t_is_measured_by_plain_steps_alone():
    """The drafting steps' verify level does not move c_T: one factor over every width, it climbed with the
    trees' widths within a drafting stretch, and carried c_T 20-40% above the plain steps between them (the
    demo pair at HumanEval batch 1). The level itself is its observations' mean at first (not a running
    mean from the profile's 1). A change of the machine's speed reaches c_T through its next measurement
    (a probe that disagrees restarts the window) or, while the machine runs faster, through the bound of the
    drafting steps' own verification."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model)
    for _ in range(3):
        costs.observe_verify(step_record(8, 1.3 * model.verify_seconds(8)), None)
    assert costs.verify_level == pytest.approx(1.3)
    costs = OnlineCosts(model)
    for _ in range(6):  # drafting at the profile's speed, with c_T probes of three plain steps 1.5x the profile's
        for _ in range(8):
            costs.observe_verify(step_record(8, model.verify_seconds(8)), None)
        for _ in range(3):
            costs.observe_ar(step_record(1, 6e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(6e-3, rel=0.01)
    for _ in range(100):  # wider trees verify 1.4x their profile: the level moves, c_T does not
        costs.observe_verify(step_record(16, 1.4 * model.verify_seconds(16)), None)
    assert costs.verify_level == pytest.approx(1.4, rel=0.01)
    assert costs.ar_step == pytest.approx(6e-3, rel=0.01)
    costs.measure_ar(C_T_FIRST)  # the machine now runs plain steps 0.6x as long: the probe restarts c_T
    for _ in range(C_T_FIRST):
        costs.observe_ar(step_record(1, 0.6 * 6e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(0.6 * 6e-3, rel=0.01)
    for _ in range(BOUND_STEPS):  # between probes, drafting steps verifying in 2 ms bound c_T at 2 ms + the loop
        costs.observe_verify(step_record(4, 2e-3), None)
    assert costs.ar_step == pytest.approx(2e-3 + costs.plain_rest)


def test_a_c_t_probe_that_disagrees_with_c_t_restarts_it():
    """Between c_T probes c_T can lag the machine. A probe's C_T_FIRST warm steps that agree with c_T join its
    window; ones whose median is more than C_T_RESET away replace it: one such step among C_T_WINDOW members
    moved nothing, and the planner drafted at 1.6x a plain step's predicted worth that ran 0.8-0.96x AR. A
    lone stalled step outside a probe stays one member."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model)
    for _ in range(C_T_WINDOW):
        costs.observe_ar(step_record(1, 8e-3), None, warm=True)
    costs.observe_ar(step_record(1, 4e-3), None, warm=True)  # not a probe: one member of the window
    assert costs.ar_step == pytest.approx(8e-3)
    costs.measure_ar(C_T_FIRST)  # agrees within C_T_RESET: more members, the median as it was
    for _ in range(C_T_FIRST):
        costs.observe_ar(step_record(1, (1 + C_T_RESET / 2) * 8e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(8e-3)
    costs.measure_ar(C_T_FIRST)  # the machine now runs plain steps in 4.5-5 ms (one of them stalls)
    for seconds in (5e-3, 4.5e-3, 20e-3)[:C_T_FIRST]:
        costs.observe_ar(step_record(1, seconds), None, warm=True)
    assert costs.ar_step == pytest.approx(5e-3)
    for _ in range(2):  # later plain steps are members of the new window
        costs.observe_ar(step_record(1, 4.5e-3), None, warm=True)
    assert costs.ar_step == pytest.approx(4.5e-3)
    cold = OnlineCosts(model)  # the first measurement: there is no c_T to disagree with
    cold.measure_ar(C_T_FIRST)
    for seconds in (5e-3, 6e-3, 7e-3)[:C_T_FIRST]:
        cold.observe_ar(step_record(1, seconds), None, warm=True)
    assert cold.ar_step == pytest.approx(6e-3)


def test_c_t_is_continuous_when_drafting_resumes():
    """Plain steps measured while plain decoding pays (or before any drafting step) are as fresh as c_T can
    be. Drafting steps verify slower than profiled (1.35x at batch 16 on the 2-core CPU, the target's weights
    cold after the head's forwards): the level they teach prices the verify curve, not c_T (had it lifted
    c_T by 35%, as it once did, the planner drafted at 0.76x AR). A resume's own verification (not steady)
    runs colder still and leaves the level alone."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    for before in (0, 1):  # no drafting step yet; a drafting stretch long ago
        costs = OnlineCosts(model)
        for _ in range(before * 20):
            costs.observe_verify(step_record(8, model.verify_seconds(8)), None)
        for _ in range(C_T_WINDOW):
            costs.observe_ar(step_record(1, 5e-3), None, warm=True)
        assert costs.ar_step == pytest.approx(5e-3)
        costs.observe_verify(step_record(8, 3.0 * model.verify_seconds(8)), None, steady=False)  # the resume
        assert costs.ar_step == pytest.approx(5e-3)
        for _ in range(40):
            costs.observe_verify(step_record(8, 1.35 * model.verify_seconds(8)), None)
        assert costs.verify_level == pytest.approx(1.35, rel=0.02)
        assert costs.ar_step == pytest.approx(5e-3, rel=0.02)


def test_c_t_is_bounded_by_what_drafting_steps_spend_verifying():
    """A plain step verifies one node: it cannot cost more than the verify stage of a drafting step that
    verified one or more, plus its own work outside verification. c_T measured in a slow stretch (8 ms) and
    carried by the level lagged a machine that sped up as drafting resumed; the median of the last
    BOUND_STEPS steady drafting steps' verify (5 ms) now bounds it, a resume's cold verification does not
    count, a slow drafting step does not raise c_T, and the next warm plain step ends the bound."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model)
    for _ in range(C_T_WINDOW):  # plain steps of 8 ms: 0.5 ms of the loop's work, 7.5 ms verifying one node
        costs.observe_ar(step_record(1, 7.5e-3, propose=5e-4), None, warm=True)
    assert costs.ar_step == pytest.approx(8e-3) and costs.plain_rest == pytest.approx(5e-4)
    costs.observe_verify(step_record(3, 4e-3), None, steady=False)  # the resume: not steady, no bound
    for _ in range(BOUND_STEPS - 1):
        costs.observe_verify(step_record(3, 5e-3), None)
        assert costs.ar_step == pytest.approx(8e-3)  # too few steps to bound it
    costs.observe_verify(step_record(3, 5e-3), None)
    assert costs.ar_step == pytest.approx(5.5e-3)
    costs.observe_verify(step_record(3, 20e-3), None)  # one slow step: the median moves nothing
    assert costs.ar_step == pytest.approx(5.5e-3)
    for _ in range(BOUND_STEPS):  # drafting steps slower than c_T: a bound, never a lift
        costs.observe_verify(step_record(3, 12e-3), None)
    assert costs.ar_step == pytest.approx(8e-3)
    for _ in range(BOUND_STEPS):
        costs.observe_verify(step_record(3, 5e-3), None)
    costs.observe_ar(step_record(1, 7.5e-3, propose=5e-4), None, warm=False)  # cold: measures nothing
    assert costs.ar_step == pytest.approx(5.5e-3)
    costs.observe_ar(step_record(1, 7.5e-3, propose=5e-4), None, warm=True)  # c_T measured again
    assert costs.ar_step == pytest.approx(8e-3)
    frozen = OnlineCosts(model, online=False)
    for _ in range(BOUND_STEPS):
        frozen.observe_verify(step_record(3, 1e-3), None)
    assert frozen.ar_step == 4e-3


def test_online_costs_learn_the_slope_between_nearby_widths():
    """A profile flat from 8 to 14 nodes (a batch-1 CPU) while the loop measures 14 nodes 40% dearer than 8:
    each width up to FINE has its own correction, so a planner choosing between them sees the slope (one
    correction for widths 8-15 priced both alike); an unmeasured width between them is interpolated."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    model = replace(model, use_fit=False, verify_points=Curve.through((1.0, 2.0, 16.0, 64.0), [4e-3, 5e-3, 5e-3, 9e-3]))
    costs = OnlineCosts(model)
    for i in range(80):
        width = (8, 14)[i % 2]
        costs.observe_verify(step_record(width, 5e-3 if width == 8 else 7e-3), None)
    assert costs.verify(14) / costs.verify(8) > 1.2  # 1.4 measured; the shrink toward the level takes some
    assert costs.verify(8) < costs.verify(11) < costs.verify(14)
    assert costs.verify(8) == pytest.approx(5e-3, rel=0.1) and costs.verify(14) == pytest.approx(7e-3, rel=0.1)


def test_frozen_costs_stay_the_profiles():
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model, online=False)
    costs.observe_ar(step_record(1, 9e-3), None, warm=True)
    costs.observe_draft(step_record(8, 1.0, 1.0, (3,)), TreeFacts(3, 1, (4,), (8,), backlog=2), None, False)
    assert costs.ar_step == model.ar_step and costs.verify(8) == pytest.approx(model.verify_seconds(8))
    assert costs.layer(4) == pytest.approx(model.draft_seconds(4))


def test_a_one_off_step_moves_no_estimate_beyond_clip():
    """On a GPU the first tree of each new shape class compiles Triton kernels: one step of 1.1 s among steps of
    5 ms (the H200's trace). Taken whole as the first reading of its width and of the level, it priced every
    drafting plan at 70x a plain step for the rest of the run; every reading is held within CLIP of the
    estimate it corrects, the first ones too, and later readings bring the prices back."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    costs = OnlineCosts(model)
    base11, base30 = model.verify_seconds(11), model.verify_seconds(30)
    costs.observe_verify(step_record(11, 1.1), None)
    assert costs.verify_level == pytest.approx(CLIP)
    assert costs.verify(11) == pytest.approx(CLIP * base11)
    assert costs.verify(30) <= CLIP * base30 * 1.0001  # an unmeasured width takes its neighbours' correction
    for _ in range(60):
        costs.observe_verify(step_record(11, base11), None)
    assert costs.verify(11) == pytest.approx(base11, rel=0.05)
    assert costs.verify_level == pytest.approx(1.0, rel=0.05)


def test_a_one_off_drafting_step_counts_clip_times_its_plan_in_the_realised_rate():
    from specdec.planner import Plan, StepPlanner

    planner = StepPlanner(4)
    planner.start(make_cost(ar_step=4e-3, loop=5e-4))
    plan = Plan(3, 2.0, 1e-2)
    planner._realise(plan, 2.0, 1.1)  # a compile step: 1.1 s against a plan of 10 ms
    assert planner.state.realised == pytest.approx((2.0 + 2.0) / (2.0 + 2.0) / ((CLIP * 1e-2 + 1e-2) / 2e-2))


def test_one_slow_width_does_not_lift_the_wider_ones():
    """The corrected curve is made non-decreasing by a weighted monotone fit, not a running maximum: a slow
    stretch at one width (a stall while it was being measured) lifted every wider width to it, and so priced
    every larger tree up, never down."""
    model = make_cost(ar_step=4e-3, loop=5e-4)
    model = replace(model, use_fit=False, verify_points=Curve.through((1.0, 2.0, 16.0, 64.0), [4e-3, 5e-3, 5e-3, 9e-3]))
    costs = OnlineCosts(model)
    for _ in range(8):
        for width in range(2, 17):
            costs.observe_verify(step_record(width, 5e-3), None)
    for _ in range(4):
        costs.observe_verify(step_record(5, 3 * 5e-3), None)  # width 5 read slow, four times
    curve = [costs.verify(w) for w in range(1, 40)]
    assert all(b >= a for a, b in zip(curve[1:], curve[2:]))  # still non-decreasing from width 2 on
    assert costs.verify(5) > 1.03 * 5e-3  # the slow readings still show, pooled with their neighbours
    # the wider widths stay near what they measured (the common level, lifted by the slow readings, moves them
    # some): 1.10x here, where the running maximum priced every width from 5 on at 1.58x
    assert costs.verify(12) < 1.15 * 5e-3 and costs.verify(16) < 1.15 * 5e-3


def test_only_steady_drafting_steps_refit_the_draft_factors():
    """A drafting step that resumes after plain steps (`steady=False`) pays a long catch-up with the draft's
    weights cold; its propose time must not refit the factors that price every steady step."""
    model = make_cost(ar_step=4e-3, loop=5e-4, layer=3e-4, catch_up=4e-4)
    costs = OnlineCosts(model)
    facts = TreeFacts(4, 3, (4, 4, 4), (8,), backlog=2)
    steady = model.catch_up_seconds(2) + 3 * model.draft_seconds(4)
    for _ in range(30):
        costs.observe_draft(step_record(8, model.verify_seconds(8), steady, (3,)), facts, None, False)
    before = (costs.catch_factor, costs.layer_factor)
    assert before == pytest.approx((1.0, 1.0), abs=0.05)
    for _ in range(10):  # resumes at 2.5x their price
        costs.observe_draft(step_record(8, model.verify_seconds(8), 2.5 * steady, (3,)), facts, None, False,
                            steady=False)
    assert (costs.catch_factor, costs.layer_factor) == before
    costs.observe_draft(step_record(8, model.verify_seconds(8), 2.5 * steady, (3,)), facts, None, False)
    assert costs.catch_factor > before[0] or costs.layer_factor > before[1]  # a steady one does
