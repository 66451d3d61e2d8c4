"""ValuSpec priced by SMART's step cost model: the cost gate (never pays -> no scorer forward, always pays
-> every step scored, its decisions on hand-made curves and timers), pruning aimed at the padded width
(`fill_to_width` against brute force), and output identity with the gate on for retrieval, draft tree and
EAGLE trees, batch 1, ragged and EOS mid-batch."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import specdec
from specdec.calibration import calibrate
from specdec.cost import Curve
from specdec.gate import DEPTHS, CostGate, StepPlan
from specdec.planner import StepRecord
from specdec.tree import TreeBatch, unpack_bits
from specdec.valuspec import BranchScorer, ValuSpecFilter, fill_to_width, keep_branches
from tests.eagle_helpers import eagle_target, head_tensors, write_head
from tests.helpers import MODERATE as SMART_COST
from tests.helpers import (counting, eos_mid_batch_case, fixed_cost, make_cost, make_model, perturbed, ragged_prompts,
                           reference, state_for, store_of_outputs)

CAL_PROMPTS = [[5, 6, 7, 8, 9], [20, 30, 40, 50]]


def priced(per_node: float, scoring: float = 1e-6):
    """A cost model whose verification costs 1 ms + `per_node` seconds per node and whose scorer (draft)
    forward costs `scoring` seconds at any width. Decoding tests use it frozen (``online=False``): the
    tiny models' measured timers would otherwise correct it toward this CPU's costs."""
    base = make_cost(layer=scoring, catch_up=scoring)
    x = (1.0, 2.0, 64.0)
    return replace(base, use_fit=False, verify_points=Curve.through(x, [1e-3 + per_node * n for n in x]))


FLAT = priced(0.0, scoring=1e-3)  # pruning can save nothing: scoring never pays
STEEP = priced(1.0)  # a second per node: any pruning pays (and sizing keeps the roots alone)
MODERATE = priced(1e-4)  # 0.1 ms per node: scoring pays, sizing keeps the likely nodes


# ------------------------------------------------------------------------------ the gate on its own
def tree_of_width(width: int, rows: int = 2) -> TreeBatch:
    return TreeBatch.from_parents([[7] + [5] * (width - 1)] * rows, [[-1] + list(range(width - 1))] * rows,
                                  [width] * rows)


def step(width: int, filter_s: float, verify_s: float) -> StepRecord:
    return StepRecord(width, np.array([2, 1]), 1e-3, filter_s, verify_s, 1e-4)


def test_gate_never_scores_when_even_an_empty_tree_would_not_pay():
    gate = CostGate(FLAT)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    plan = gate.plan(tree_of_width(16), state)
    assert not plan.score and not plan.probe and plan.cost == pytest.approx(1e-3)


def test_gate_probes_then_scores_what_pays_and_probes_again_while_skipping():
    model = priced(1e-4, scoring=1e-3)  # pruning 16 -> 8 nodes saves 0.8 ms: less than the 1 ms scoring
    gate = CostGate(model, probe_every=4)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    first = gate.plan(tree_of_width(16), state)
    assert first.score and first.probe  # nothing measured yet
    gate.record(step(8, 1e-3, float(model.verify_seconds(8))), first, 16)
    assert gate.est.width_ratio == 0.5 and gate.est.scoring == pytest.approx(1.0)
    # a wide tree: pruning half of 64 nodes saves 3.2 ms, more than the scoring
    wide = gate.plan(tree_of_width(64), state)
    assert wide.score and not wide.probe and wide.saving == pytest.approx(3.2e-3)
    plans = []
    for _ in range(4):
        plans.append(gate.plan(tree_of_width(16), state))
        gate.record(step(16, 1e-5, float(model.verify_seconds(16))), plans[-1], 16)
    assert [p.score for p in plans] == [False, False, False, True] and plans[-1].probe
    assert plans[0].saving == pytest.approx(8e-4) and plans[0].cost == pytest.approx(1e-3)


def test_gate_prices_the_tokens_sizing_cuts():
    """Pruning 64 nodes to 32 saves 3.2 ms of verification against 1 ms of scoring. Once the sized steps are
    measured to keep 90% of the whole tree's predicted tokens and an unscored step takes 10 ms, the cut
    tokens cost 1 ms more: still scored; at 75% they cost 2.5 ms and the tree goes whole."""
    model = priced(1e-4, scoring=1e-3)
    gate = CostGate(model, probe_every=0)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    gate.record(step(32, 1e-3, float(model.verify_seconds(32))), gate.plan(tree_of_width(64), state), 64)
    assert gate.est.retained is None and gate.plan(tree_of_width(64), state).saving == pytest.approx(3.2e-3)
    gate.record(step(32, 1e-3, float(model.verify_seconds(32))), StepPlan(predicted=(1.0,) * DEPTHS, retained=0.9), 64)
    gate.record(StepRecord(64, np.array([2, 1]), 2.58e-3, 1e-5, 7.4e-3, 1e-5), StepPlan(score=False), 64)  # V(64)
    assert gate.est.retained == pytest.approx(0.9) and gate.est.whole_step == pytest.approx(10e-3)
    plan = gate.plan(tree_of_width(64), state)
    assert plan.score and plan.saving == pytest.approx(3.2e-3 - 1e-3)
    gate.est.retained = 0.75
    plan = gate.plan(tree_of_width(64), state)
    assert not plan.score and plan.saving == pytest.approx(3.2e-3 - 2.5e-3)
    offline = CostGate(model, probe_every=0, online=False)  # C: the cost model's loop and V(64)
    offline.start(state)
    offline.est.scoring, offline.est.retained, offline.est.whole_step = 1.0, 0.75, 1.0
    loss = 0.25 * (float(model.loop) + float(model.verify_seconds(64)))
    assert offline.plan(tree_of_width(64), state).saving == pytest.approx(3.2e-3 - loss)


def test_gate_learns_the_measured_costs():
    """Scoring measured at 4x its prior and verification at 3x the model: the decisions follow."""
    model = priced(1e-4, scoring=1e-3)
    gate = CostGate(model, probe_every=0)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    for _ in range(30):
        gate.plan(tree_of_width(64), state)
        gate.record(step(32, 4e-3, 3 * float(model.verify_seconds(32))), StepPlan(score=True), 64)
    assert gate.est.scoring == pytest.approx(4.0)
    for width in (1, 16, 32, 64):
        assert gate.verify(width) == pytest.approx(3 * float(model.verify_seconds(width)), rel=2e-2), width
    plan = gate.plan(tree_of_width(64), state)
    assert plan.saving == pytest.approx(3 * 3.2e-3, rel=2e-2) and plan.cost == pytest.approx(4e-3) and plan.score
    assert not gate.plan(tree_of_width(24), state).score  # 3 x 1.2 ms < 1.1 x 4 ms


def test_gate_learns_a_flat_verify_curve_and_stops_scoring():
    """The profile says pruning 64 nodes to 32 saves 3.2 ms; the loop measures every width at 5 ms (a flat
    batch-1 curve). The gate measures the whole trees on its skip probes and the pruned ones on scored steps,
    the predicted saving falls below the scoring, and it skips, where one correction for the whole curve
    would have kept the profile's 3.2 ms difference (scaled) and scored every step."""
    model = priced(1e-4, scoring=1e-3)
    gate = CostGate(model, probe_every=4)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    plans = []
    for i in range(60):
        plans.append(gate.plan(tree_of_width(64), state))
        gate.record(step(32 if plans[-1].score else 64, 1e-3, 5e-3), plans[-1], 64)
    assert plans[0].probe and plans[1].score and not plans[1].probe  # measure, then score what pays
    assert not plans[3].score and plans[3].probe  # a scoring gate lets a step go whole to measure it
    assert sum(p.score for p in plans[-30:]) <= 2  # having measured both widths at 5 ms, it stops scoring
    plan = gate.plan(tree_of_width(64), state)
    assert plan.saving < 5e-4 < 1.1 * plan.cost and gate.verify(64, whole=True) == pytest.approx(5e-3)


def test_a_cold_first_scoring_step_does_not_stop_the_gate_for_good():
    """The first scored step measured 40 ms of scoring (cold), which makes even emptying every row look
    hopeless; the gate still probes on its schedule (at the base rate while each probe moves the estimate),
    and once probes bring it down to the usual 1 ms it scores what pays again. Priced by the profile alone
    (nothing measured), hopeless stays hopeless: no probe (the test above)."""
    model = priced(1e-4, scoring=1e-3)  # 64 -> 32 nodes saves 3.2 ms
    gate = CostGate(model, probe_every=4)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    first = gate.plan(tree_of_width(64), state)
    assert first.score and first.probe
    gate.record(step(32, 40e-3, float(model.verify_seconds(32))), first, 64)
    plans = []
    for _ in range(40):
        plans.append(gate.plan(tree_of_width(64), state))
        scored = plans[-1].score
        width = 32 if scored else 64
        gate.record(step(width, 1e-3 if scored else 1e-5, float(model.verify_seconds(width))), plans[-1], 64)
    assert not plans[0].score and plans[3].probe and plans[3].score  # hopeless at first, probed on schedule
    assert [i for i, p in enumerate(plans[:24]) if p.probe] == [3, 7, 11, 15, 19, 23]  # no doubling while it moves
    assert all(p.score for p in plans[-8:] if not p.probe)  # measured cheap again: it scores what pays


def test_probe_interval_doubles_while_probes_find_no_pay_and_resets_on_a_paying_step():
    model = priced(1e-4, scoring=1e-3)  # pruning 16 -> 8 nodes saves 0.8 ms: less than the 1 ms scoring
    gate = CostGate(model, probe_every=4, online=False)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)

    def steps(width: int, n: int) -> list[StepPlan]:
        plans = []
        for _ in range(n):
            plans.append(gate.plan(tree_of_width(width), state))
            gate.record(step(width // 2 if plans[-1].score else width, 1e-3, 1e-3), plans[-1], width)
        return plans

    plans = steps(16, 4 + 8 + 16 + 4)  # offline: the scoring is priced as profiled, no first probe
    probes = [i for i, p in enumerate(plans) if p.probe]
    assert probes == [3, 11, 27] and all(p.score == p.probe for p in plans)  # intervals 4, 8, 16
    assert gate.est.score_every == 32
    assert steps(64, 1)[0].score and not plans[-1].probe  # a wide tree pays: scored, and the interval resets
    assert gate.est.score_every == 4
    assert [p.probe for p in steps(16, 4)] == [False, False, False, True]


def sized(gate: CostGate, tree: TreeBatch, keep: torch.Tensor, scores: torch.Tensor, active: torch.Tensor):
    keep2, predicted = gate.size(tree, keep, scores, active)
    assert predicted.shape == (DEPTHS + 1,)
    return keep2, predicted.tolist()[:DEPTHS]


def test_size_picks_the_width_with_the_most_tokens_per_second_worked_example():
    """The module docstring's example: one row, kept path probabilities 0.9, 0.5, 0.1, F = 2 ms, V(2..4) =
    5, 6, 10 ms: rates 1.9/7, 2.4/8, 2.5/12 per ms, so the root and two nodes. With V(1) = 1 ms the roots
    alone would rate 1/3, yet sizing keeps the rule's candidates (at least one per row)."""
    base = make_cost(layer=1e-6, catch_up=1e-6)
    x = (1.0, 2.0, 3.0, 4.0, 64.0)
    model = replace(base, use_fit=False, verify_points=Curve.through(x, [4e-3, 5e-3, 6e-3, 10e-3, 70e-3]))
    gate = CostGate(model, online=False)
    state = state_for(*ragged_prompts([4]))
    gate.start(state)
    gate.est.fixed = 2e-3
    # a star: root, then children 1, 2, 3 with log-probs of 0.9, 0.5, 0.1 (path means of one token)
    tree = TreeBatch.from_parents([[7, 3, 4, 5]], [[-1, 0, 0, 0]], [4])
    scores = torch.tensor([[0.0, math.log(0.5), math.log(0.9), math.log(0.1)]])
    keep, predicted = sized(gate, tree, tree.valid.clone(), scores, torch.tensor([True]))
    assert keep.tolist() == [[True, True, True, False]] and predicted == pytest.approx([1.4] + [0.0] * (DEPTHS - 1))
    # retained: 1 + 0.9 + 0.5 of the whole tree's 1 + 0.9 + 0.5 + 0.1 predicted tokens
    assert gate.size(tree, tree.valid.clone(), scores, torch.tensor([True]))[1][-1].item() == pytest.approx(2.4 / 2.5)
    cheap_root = replace(model, verify_points=Curve.through(x, [1e-3, 5e-3, 6e-3, 10e-3, 70e-3]))
    gate = CostGate(cheap_root, online=False)
    gate.start(state)
    gate.est.fixed = 2e-3
    keep, _ = sized(gate, tree, tree.valid.clone(), scores, torch.tensor([True]))
    assert keep.tolist() == [[True, True, True, False]]
    only_root = torch.tensor([[True, False, False, False]])  # the rule kept nothing: the root alone stays
    assert sized(gate, tree, only_root, scores, torch.tensor([True]))[0].tolist() == only_root.tolist()


@pytest.mark.parametrize("seed", range(5))
def test_size_against_brute_force(seed):
    """Every width W from 2 is priced as sum over active rows (1 + the row's top W - 1 values of the kept
    nodes) / (F + V(W)), a node's value being a_d * P by its depth d, least along its root path; the best W
    wins (the narrowest on ties), each row keeps its top W - 1 (ties to the lower index), the result stays
    closed under ancestors, and the prediction is the sized nodes' P summed by depth."""
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 4, 13)
    node_lp = torch.tensor(rng.uniform(-1.5, 0.0, (4, 13)).round(1), dtype=torch.float32)  # exact 0s: ties
    scores = specdec.ops.path_mean(torch.where(tree.valid, node_lp, 0.0), tree.parents, tree.num_nodes)
    keep = keep_branches(tree, scores, torch.tensor([-0.6, -0.8, -1.0]), "prefix")
    active = torch.tensor([True, True, False, True])
    model = priced(float(rng.uniform(2e-4, 2e-3)))
    gate = CostGate(model, online=False)
    gate.start(state_for(*ragged_prompts([4, 5, 6, 7])))
    a = 1.0 + 0.5 * np.arange(1, DEPTHS + 1)  # a_d = 1.5, 2, 2.5, ...: deeper nodes undervalued more
    gate.est.fixed, gate.est.accepted, gate.est.predicted = 2e-3, 10 * a - 1, np.full(DEPTHS, 9.0)
    assert gate.est.accept_scale == pytest.approx(a)
    got, predicted = sized(gate, tree, keep, scores, active)
    parents, depth = tree.parents.tolist(), tree.depth.tolist()
    node_p = torch.exp(scores * tree.depth).tolist()
    ancestor = unpack_bits(tree.ancestor_mask, 13).tolist()
    value = [[min(a[depth[b][j] - 1] * node_p[b][j] if j else math.inf for j in range(13) if ancestor[b][i][j])
              for i in range(13)] for b in range(4)]
    ranked = [sorted((i for i in range(1, 13) if keep[b, i]), key=lambda i: (-value[b][i], i)) for b in range(4)]
    width_max = int(keep.sum(1).max())
    rates = []
    for w in range(2, width_max + 1):  # from 2: the rule kept candidates, sizing keeps at least one
        tokens = sum(1 + sum(value[b][i] for i in ranked[b][:w - 1]) for b in range(4) if active[b])
        rates.append(tokens / (2e-3 + float(model.verify_seconds(w))))
    best = int(np.argmax(rates)) + 2
    want_by_depth = [0.0] * DEPTHS
    for b in range(4):
        want = {0, *ranked[b][:best - 1]} if tree.num_nodes[b] > 0 else set()
        assert {i for i in range(13) if got[b, i]} == want, b
        assert all(parents[b][i] in want for i in want if i > 0), b
        for i in ranked[b][:best - 1] if active[b] else ():
            want_by_depth[depth[b][i] - 1] += node_p[b][i]
    assert predicted == pytest.approx(want_by_depth, rel=1e-4, abs=1e-6)
    assert 1 < best < width_max  # these costs put the optimum inside: the cut and the rule both matter


def test_size_learns_the_acceptance_scale_by_depth_from_what_was_accepted():
    """Two rows accept 3 candidates each (bonus excluded): one at each of depths 1, 2, 3. The scorer
    predicted 2, 1 and 0.5 there: after enough steps the scales read 1, 2 and 4, and 1 (the prior) where
    nothing was predicted or accepted."""
    gate = CostGate(priced(1e-4), online=False)
    state = state_for(*ragged_prompts([4, 6]))
    gate.start(state)
    predicted = (2.0, 1.0, 0.5) + (0.0,) * (DEPTHS - 3)
    for _ in range(300):
        gate.record(StepRecord(4, np.array([4, 4]), 1e-3, 1e-3, 1e-3, 1e-4), StepPlan(predicted=predicted), 8)
    want = [1.0, 2.0, 4.0] + [1.0] * (DEPTHS - 3)
    assert gate.est.accept_scale == pytest.approx(want, rel=0.05)  # the prior weighs 1 against ~33 steps
    gate.record(StepRecord(4, np.array([1, 1]), 1e-3, 1e-3, 1e-3, 1e-4), StepPlan(), 8)
    assert gate.est.accept_scale == pytest.approx(want, rel=0.05)  # an unsized step teaches nothing


@pytest.mark.parametrize("kw, match", [({"cost_model": 1.0}, "cost_model: expected a CostModel or a Profile"),
                                       ({"margin": -1}, "margin: expected"), ({"probe_every": 1.5}, "probe_every"),
                                       ({"online": 1}, "online: expected a bool"),
                                       ({"size": "yes"}, "size: expected a bool")])
def test_gate_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        CostGate(**{"cost_model": FLAT, **kw})


def test_filter_takes_a_cost_model_or_a_gate_not_both():
    cal = specdec.Calibration(taus=(-1.0,), num_windows=(1,), window=1, delta=0.05, target="t", scorer="s",
                              num_prompts=1, max_new_tokens=4)
    scorer = make_model("llama", seed=3)
    assert isinstance(ValuSpecFilter(scorer, cal, cost_model=FLAT).gate, CostGate)
    with pytest.raises(ValueError, match="cost_model: pass a gate or a cost model"):
        ValuSpecFilter(scorer, cal, cost_model=FLAT, gate=CostGate(FLAT))
    with pytest.raises(ValueError, match="fill: expected a bool"):
        ValuSpecFilter(scorer, cal, fill=1)


# ---------------------------------------------------------------------------- pruning to the padded width
def random_tree(rng: np.random.Generator, rows: int, size: int) -> TreeBatch:
    counts = rng.integers(1, size + 1, rows)
    parents = [[-1] + [int(rng.integers(0, i)) for i in range(1, n)] + [-1] * (size - n) for n in counts]
    tokens = rng.integers(3, 90, (rows, size)).tolist()
    return TreeBatch.from_parents(tokens, parents, counts.tolist())


@pytest.mark.parametrize("seed", range(6))
def test_fill_to_width_against_brute_force(seed):
    """Each row keeps what the rule kept plus its best cut nodes (by the worst margin on their root path,
    ancestors first) up to the widest row's kept count; the result is closed under ancestors."""
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, 4, 13)
    scores = torch.tensor(rng.normal(-1.5, 1.0, (4, 13)).round(1), dtype=torch.float32)  # ties on purpose
    taus = torch.tensor([-1.0, -1.5, -2.0])
    keep = keep_branches(tree, scores, taus, "prefix")
    got = fill_to_width(tree, keep, scores, taus)
    width = int(keep.sum(1).max())
    parents, depth = tree.parents.tolist(), tree.depth.tolist()
    for b, n in enumerate(tree.num_nodes.tolist()):
        margin = [float("inf") if i == 0 else float(scores[b, i] - taus[min(depth[b][i], 3) - 1]) for i in range(n)]
        worst = []
        for i in range(n):
            w, j = margin[i], parents[b][i]
            while j >= 0:
                w, j = min(w, margin[j]), parents[b][j]
            worst.append(float("inf") if keep[b, i] else w)
        order = sorted(range(n), key=lambda i: (-worst[i], i))  # best first, lower index on ties
        want = set(order[:min(width, n)])
        assert {i for i in range(13) if got[b, i]} == want, b
        assert all(parents[b][i] in want for i in want if i > 0), b  # closed under ancestors
    assert torch.equal(got & keep, keep) and int(got.sum(1).max()) == width


def test_fill_keeps_the_padded_width_and_refills_an_emptied_row():
    # row 0: chain of 4 (its rule keeps nothing); row 1: a star of 4 children (all kept): padded width 5
    tree = TreeBatch.from_parents([[7, 3, 4, 5, 6], [7, 8, 9, 10, 11]], [[-1, 0, 1, 2, -1], [-1, 0, 0, 0, 0]],
                                  [4, 5])
    scores = torch.tensor([[0.0, -1.2, -1.5, -3.0, 0.0], [0.0, -0.5, -0.5, -0.5, -0.5]])
    keep = keep_branches(tree, scores, -1.0, "prefix")
    assert keep.sum(1).tolist() == [1, 5]
    assert fill_to_width(tree, keep, scores, -1.0).tolist() == [[True] * 4 + [False], [True] * 5]
    one = TreeBatch.from_parents([[7, 3, 4, 5]], [[-1, 0, 1, 2]], [4])  # batch 1: the rule's cut stands
    keep1 = keep_branches(one, scores[:1, :4], -1.0, "prefix")
    assert torch.equal(fill_to_width(one, keep1, scores[:1, :4], -1.0), keep1)


# ------------------------------------------------------------------------------ decoding with the gate
def run(target, supplier, filt, ids, mask, n=24, eos=None):
    gen = specdec.SpeculativeGenerator(target, supplier, filter=filt)
    return gen.generate(ids, attention_mask=mask, max_new_tokens=n, pad_token_id=0,
                        eos_token_id=[] if eos is None else eos)


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_gate_that_never_pays_never_runs_the_scorer_and_one_that_always_pays_scores_every_step(lengths):
    target = make_model("qwen2")
    noisy = perturbed(target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    cal = calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=0.4)
    stats = {}
    for name, cost in (("never", FLAT), ("always", STEEP)):
        scorer = BranchScorer(noisy)  # not the supplier's draft: a scorer forward per scored step
        calls = counting(scorer)
        supplier = specdec.DraftSupplier(perturbed(target, seed=9), mode="tree", depth=3, topk=2, total_tokens=7)
        out = run(target, supplier, ValuSpecFilter(scorer, cal, gate=CostGate(cost, online=False)), ids, mask)
        assert torch.equal(out.sequences, ref), name
        f = stats[name] = out.stats.filter
        assert f.steps == out.stats.steps
        if name == "never":
            assert calls[0] == 0 and f.steps_unscored == f.steps and f.nodes_kept == f.nodes
            assert f.width_verified == f.width_proposed
        else:
            assert calls[0] == f.steps and f.steps_unscored == 0 and f.unscored == 0
            assert f.width_verified < f.width_proposed and f.to_dict()["width_saved_rate"] > 0


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
@pytest.mark.parametrize("unit", ["branch", "prefix"])
def test_identity_with_the_gate_retrieval_and_draft_tree(tmp_path, lengths, unit):
    target = make_model("llama")
    noisy = perturbed(target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    store = store_of_outputs(tmp_path, ids, mask, ref[:, ids.shape[1]:ids.shape[1] + 16])
    cal = calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=0.4)
    for supplier in (specdec.RetrievalSupplier(store, continuation=6, budget=12),
                     specdec.DraftSupplier(noisy, mode="tree", depth=4, topk=3, total_tokens=10)):
        for gate in (CostGate(STEEP, online=False, size=False), CostGate(MODERATE, online=False)):
            out = run(target, supplier, ValuSpecFilter(noisy, cal, unit=unit, gate=gate), ids, mask)
            assert torch.equal(out.sequences, ref), (type(supplier).__name__, gate.sizes)
            f = out.stats.filter
            assert 0 < f.nodes_kept < f.nodes and f.steps_unscored == 0


@pytest.mark.hf
@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]], ids=["batch1", "ragged3"])
def test_identity_with_the_gate_eagle(tmp_path, lengths):
    target = eagle_target("llama")
    head = specdec.EagleHead.from_pretrained(write_head(tmp_path / "h", *head_tensors(target, "eagle3")), target)
    scorer = make_model("llama", seed=4)
    ids, mask = ragged_prompts(lengths, seed=5)
    ref = reference(target, ids, mask, 20, eos=None)
    cal = calibrate(target, scorer, CAL_PROMPTS, max_new_tokens=16, window=4, delta=0.4)
    for cost in (STEEP, FLAT):
        out = run(target, specdec.EagleSupplier(head, depth=4, topk=3, total_tokens=10),
                  ValuSpecFilter(scorer, cal, gate=CostGate(cost, online=False)), ids, mask, n=20)
        assert torch.equal(out.sequences, ref)
        f = out.stats.filter
        assert (f.steps_unscored == 0) if cost is STEEP else (f.steps_unscored > 0 and f.nodes_kept == f.nodes)


@pytest.mark.hf
@pytest.mark.filterwarnings("ignore:cost_model")  # hand-made cost models, not a profile of this machine
@pytest.mark.parametrize("lengths", [[9], [5, 11, 8]], ids=["batch1", "ragged3"])  # 9: prompt lookup finds matches
@pytest.mark.parametrize("method", ["chain", "smart", "prompt_lookup"])
def test_identity_with_the_gate_other_suppliers(method, lengths):
    """The suppliers the tests above leave out, under a gate that scores every step and sizes, both units."""

    class Always(CostGate):  # sizes as the cost gate does, scores whatever its price
        def plan(self, tree, state):
            return StepPlan()

    target = make_model("llama")
    noisy = perturbed(target)
    ids, mask = ragged_prompts(lengths)
    ref = reference(target, ids, mask, 24, eos=None)
    cal = calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=0.4)
    for unit in ("branch", "prefix"):
        supplier = {"chain": lambda: specdec.DraftSupplier(noisy, mode="chain", depth=4),
                    "smart": lambda: specdec.SmartSupplier(noisy, fixed_cost(**SMART_COST, batch_size=len(lengths)),
                                                           topk=3, frontier=2, max_depth=4),
                    "prompt_lookup": lambda: specdec.PromptLookupSupplier(max_ngram=3, num_pred=5, max_matches=3),
                    }[method]()
        out = run(target, supplier, ValuSpecFilter(noisy, cal, unit=unit, gate=Always(MODERATE, online=False)), ids,
                  mask)
        assert torch.equal(out.sequences, ref), unit
        f = out.stats.filter
        assert f.steps_unscored == 0 and f.width_verified <= f.width_proposed and 0 < f.nodes_kept <= f.nodes, unit


@pytest.mark.hf
def test_identity_with_the_gate_eos_mid_batch(tmp_path):
    target = make_model("qwen3")
    noisy = perturbed(target)
    ids, mask, eos, ref, store = eos_mid_batch_case(tmp_path, target)
    cal = calibrate(target, noisy, CAL_PROMPTS, max_new_tokens=16, window=4, delta=0.4)
    for supplier in (specdec.RetrievalSupplier(store, continuation=5, budget=16),
                     specdec.DraftSupplier(noisy, mode="tree", depth=4, topk=3, total_tokens=10)):
        for cost in (STEEP, FLAT):
            filt = ValuSpecFilter(target, cal, gate=CostGate(cost, online=False))
            out = run(target, supplier, filt, ids, mask, n=20, eos=eos)
            assert torch.equal(out.sequences, ref), (type(supplier).__name__, cost is STEEP)
            row0 = out.sequences[0, ids.shape[1]:].tolist()
            assert eos in row0 and all(t == 0 for t in row0[row0.index(eos) + 1:])


@pytest.mark.hf
def test_audit_tells_the_sizing_cuts_from_the_rule_ones():
    """Self-drafting chains (always accepted whole), a threshold that keeps everything and a gate whose
    verification costs a second a node: sizing sends one candidate per row, so every row-step is a false
    discard, and none of them is the rule's."""
    target = make_model("mistral")
    ids, mask = ragged_prompts([5, 9])
    filt = specdec.FixedThresholdFilter(target, 1e-30, audit=True, gate=CostGate(STEEP, online=False))
    gen = specdec.SpeculativeGenerator(target, specdec.DraftSupplier(target, mode="chain", depth=3), filter=filt)
    out = gen.generate(ids, attention_mask=mask, max_new_tokens=12, pad_token_id=0, eos_token_id=[])
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=None))
    f = out.stats.filter
    # sizing keeps one candidate of each row the rule kept: the first of the chain's three
    assert f.audited == f.rows == f.false_discards and f.tokens_lost == 2 * f.rows and f.rule_discards == 0
    assert f.to_dict()["rule_discard_rate"] == 0.0 and f.nodes_kept == f.rows
