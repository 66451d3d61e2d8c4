"""The step planner's quick drafting steps: while drafting pays by the full margin, a full plan every
QUICK_DRAFT-th drafting step, the steps between taking its cap and learned from at the next one (the planner's
fixtures: test_planner.py)."""

from __future__ import annotations

import numpy as np
import pytest

import specdec.planner as planner_module
from specdec.planner import MARGIN, QUICK_DRAFT, WARMUP, StepPlanner, StepRecord, TreeFacts
from tests.methods.test_planner import MAX_DEPTH, CountingDepths, knee_cost


def run(steps: int, probe_every: int, slow_from: int | None = None) -> tuple[list, list[bool]]:
    """`steps` steps of a planner over drafting that pays (each as planned, or from step `slow_from` on at a
    third of its planned tokens in twice its seconds); returns the plans and, per step, whether its plan
    was a full one (it learned every step recorded before it)."""
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=probe_every)
    planner.start(knee_cost(6, 1e-3))
    planner.depths = CountingDepths(0.9)
    plans, full, recorded = [], [], 0
    for i in range(steps):
        plan = planner.plan(backlog=1)
        plans.append(plan)
        full.append(planner.depths.steps == recorded)
        slow = slow_from is not None and i >= slow_from
        if plan.depth:
            seconds = plan.seconds * (2 if slow else 1)
            tokens = max(plan.length / 3, 1.0) if slow else plan.length
            planner.record(StepRecord(8, np.array([tokens]), 0.2 * seconds, 0.0, 0.8 * seconds, 0.0),
                           TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
            recorded += 1
        else:
            planner.record(StepRecord(1, np.ones(1), 0.0, 0.0, plan.seconds, 0.0), None)
    return plans, full


def test_drafting_that_pays_weighs_a_full_plan_every_few_steps(monkeypatch):
    """Drafting that pays by the full margin: every step gets a full plan until QUICK_DRAFT drafting steps in
    a row were learned from (the warm-up's), then one step in QUICK_DRAFT, and the steps between learn nothing
    until it. The decisions (caps, probes at D* + 2 every `probe_every` steps) are those of a planner that
    weighs every step, whose steps here realise their plans."""
    plans, full = run(60, probe_every=10)
    monkeypatch.setattr(planner_module, "QUICK_DRAFT", 10 ** 9)  # never quick: a full plan every step
    every, every_full = run(60, probe_every=10)
    assert all(every_full)
    assert [(p.depth, p.probe) for p in plans] == [(p.depth, p.probe) for p in every]
    assert all(p.depth for p in plans) and all(p.gain > 1 + MARGIN for p in plans if p.gain)
    assert all(full[:WARMUP + 1])  # the warm-up's probes, then the first plan after WARMUP steps learned
    quick = [i for i, f in enumerate(full) if not f]
    assert len(quick) >= (60 - WARMUP) // 2  # most steps after the warm-up are quick
    probes = [i for i, p in enumerate(plans) if p.probe and i >= WARMUP]
    assert probes and all(full[i] for i in probes)  # a probe is always weighed by a full plan
    runs = np.diff([i for i, f in enumerate(full) if f])
    assert runs.max() == QUICK_DRAFT  # at most QUICK_DRAFT - 1 quick steps between full plans


def test_drafting_that_stops_paying_turns_plain_within_a_few_steps_of_a_planner_weighing_each(monkeypatch):
    """From step 30 on, drafting steps take twice their seconds for a third of their tokens: the planner
    turns plain at most QUICK_DRAFT - 1 steps after one that weighs every step (the quick ones reach the next
    full plan, which learns them all), and its retries are single steps (a first drafting step after plain
    ones is weighed at the next step)."""
    plans, full = run(200, probe_every=1000, slow_from=30)
    monkeypatch.setattr(planner_module, "QUICK_DRAFT", 10 ** 9)
    every, _ = run(200, probe_every=1000, slow_from=30)
    turn = [next(i for i, p in enumerate(ps) if i >= 30 and not p.depth) for ps in (plans, every)]
    assert turn[1] <= turn[0] <= turn[1] + QUICK_DRAFT - 1
    later = [i for i, p in enumerate(plans) if i > turn[0] and p.depth]
    assert all(full[i] for i in later)  # no quick step after turning plain: each retry is weighed at once
    assert 0 < len(later) < 10  # rare: the evidence of the slow steps ages with every step


@pytest.mark.parametrize("quick", [QUICK_DRAFT, 10 ** 9])
def test_quick_steps_learn_in_order_at_the_next_full_plan(quick, monkeypatch):
    """Whether the steps between full plans are learned from at once or at the next full plan, a planner
    whose steps realise their plans ends with the same estimates: learning is deferred, not dropped."""
    monkeypatch.setattr(planner_module, "QUICK_DRAFT", quick)
    planner = StepPlanner(MAX_DEPTH, online=False, probe_every=1000)
    planner.start(knee_cost(6, 1e-3))
    planner.depths = CountingDepths(0.9)
    for _ in range(40):
        plan = planner.plan(backlog=1)
        planner.record(StepRecord(8, np.array([plan.length]), 0.2 * plan.seconds, 0.0, 0.8 * plan.seconds, 0.0),
                       TreeFacts(plan.depth, plan.depth - 1, (4,) * (plan.depth - 1), (8,), backlog=1))
    planner.report()
    assert planner.depths.steps == 40 and planner.stats.steps_drafted == 40
