"""SmartSupplier: the planner's extremes (never pays: the draft never runs; always pays: deep trees), budget,
output identity (with plain stretches and catch-ups), online costs, argument errors."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import specdec
from specdec.cost import CostModel
from tests.helpers import (ARCHS, MODERATE, SCHEDULE, VOCAB, fixed_cost, generate_with, make_model, perturbed,
                           plan_schedule, ragged_prompts, reference, state_for, synthetic_profile)


def first_tree(target, draft, cost, lengths, **kw):
    ids, mask = ragged_prompts(lengths, seed=5)
    sup = specdec.SmartSupplier(draft, replace(cost, batch_size=len(lengths)), **kw)
    sup.attach(target)
    state = state_for(ids, mask)
    sup.start(state)
    tree = sup.propose(state)
    tree.validate(vocab_size=VOCAB)
    return ids, mask, sup, tree


def count_forwards(model) -> list[int]:
    calls = [0]
    model.register_forward_hook(lambda *_: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("lengths", [[7], [5, 11, 8]])
def test_when_drafting_never_pays_the_draft_never_runs(lengths):
    target = make_model("llama")
    draft = perturbed(target)
    calls = count_forwards(draft)
    # A draft layer or catch-up of a second against a 10 ms AR step: no tree can pay, not even as a probe.
    cost = fixed_cost(**MODERATE, batch_size=len(lengths), layer=1.0, catch_up=1.0)
    ids, mask = ragged_prompts(lengths)
    out = generate_with(target, specdec.SmartSupplier(draft, cost, topk=3, frontier=3, max_depth=5), ids, mask, 16)
    assert torch.equal(out.sequences, reference(target, ids, mask, 16, eos=[]))
    assert calls[0] == 0  # not even the prompt's prefill
    assert out.stats.plan.steps_drafted == 0 and out.stats.plan.steps_ar > 0 and out.stats.plan.probes == 0
    assert out.stats.mean_tree_size == 1.0 and out.stats.mean_accepted_length == 1.0


def test_when_drafting_always_pays_trees_are_deep():
    target = make_model("qwen2")
    # Verification nearly free per node, draft forwards free, the draft the target itself (every token accepted).
    cheap = fixed_cost(c0=0.01, gamma=1e-9, delta=1e-3, rho=1.0, layer=1e-7, catch_up=1e-7)
    ids, mask = ragged_prompts([6])
    sup = specdec.SmartSupplier(target, cheap, topk=2, frontier=2, max_depth=5, online=False)
    out = generate_with(target, sup, ids, mask, 25)
    assert torch.equal(out.sequences, reference(target, ids, mask, 25, eos=[]))
    assert out.stats.plan.steps_ar == 0
    assert out.stats.accepted_lengths[:-1] == [6] * (len(out.stats.accepted_lengths) - 1)  # depth 5 + bonus each step


def test_nearly_free_verification_grows_to_the_budget():
    target = make_model("qwen2")
    free = fixed_cost(c0=1.0, gamma=1e-9, delta=1e-3, rho=1.0, layer=1e-9, catch_up=1e-9)
    _, _, sup, tree = first_tree(target, perturbed(target), free, [5, 8, 3], topk=3, frontier=3, budget=12)
    assert tree.num_nodes.tolist() == [12, 12, 12] and tree.size == 12 == sup.max_tree_size()
    _, _, sup, tree = first_tree(target, perturbed(target), free, [5], topk=2, frontier=2, max_depth=3)
    assert sup.max_tree_size() == 1 + 2 + 2 * 2 * 2  # budget None: capped by what the layers can hold
    assert tree.num_nodes.tolist() == [11]


def test_steep_cost_yields_the_root_alone_and_plain_decoding():
    target = make_model("qwen3")
    steep = fixed_cost(c0=0.0, gamma=1.0, delta=5.0, rho=1.0, batch_size=2)  # V(n + 1) ~ e^5 V(n): nothing pays
    ids, mask, _, tree = first_tree(target, target, steep, [5, 8], topk=4, frontier=4, alpha=1.0)
    assert tree.size == 1 and tree.num_nodes.tolist() == [1, 1] and tree.max_depth == 0
    out = generate_with(target, specdec.SmartSupplier(target, steep), ids, mask, 6)
    assert torch.equal(out.sequences, reference(target, ids, mask, 6, eos=[]))
    assert out.stats.mean_accepted_length == 1.0 and out.stats.mean_tree_size == 1.0


# Output identity. The full grid (4 architectures x 2 batch shapes x 3 alphas, plus EOS) takes minutes on
# 2 cores, so each architecture runs a different alpha per case and every alpha meets every case.
ALPHAS = {"llama": (0.5, 0.8, 1.0), "mistral": (0.8, 1.0, 0.5), "qwen2": (1.0, 0.5, 0.8), "qwen3": (0.5, 1.0, 0.8)}


@pytest.fixture(scope="module", params=sorted(ARCHS))
def models(request):
    target = make_model(request.param)
    return request.param, target, perturbed(target)


@pytest.mark.hf
@pytest.mark.parametrize("case", [0, 1], ids=["batch1", "ragged3"])
def test_identity(models, case):
    arch, target, draft = models
    alpha = ALPHAS[arch][case]
    ids, mask = ragged_prompts([[7], [5, 11, 8]][case])
    ref = reference(target, ids, mask, 20, eos=[])
    # the default (one ranking over the pooled layers), the pool drafted at once, the layered rule on the
    # host, the device rule
    selection = {"qwen2": "layered", "qwen3": "layered"}.get(arch, "global")
    sup = specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=ids.shape[0]), alpha=alpha, topk=3,
                                frontier=3, max_depth=5, online=False, selection=selection,
                                padding_aware=case == 1 and arch in ("llama", "qwen2"),
                                early_stop=arch not in ("mistral", "qwen3"))
    out = generate_with(target, sup, ids, mask, 20)
    assert torch.equal(out.sequences, ref), f"{arch} alpha {alpha}"
    assert out.stats.mean_tree_size > 2 and out.stats.mean_accepted_length > 1.0  # trees were built and used


@pytest.mark.hf
@pytest.mark.parametrize("case", ["batch1", "ragged3", "eos"])
def test_identity_across_plain_stretches(models, case):
    arch, target, draft = models
    ids, mask = ragged_prompts([7] if case == "batch1" else [6, 10, 9], seed=3)
    eos = []
    if case == "eos":
        eos = [int(reference(target, ids, mask, 24, eos=None)[0, ids.shape[1] + 6])]
    ref = reference(target, ids, mask, 24, eos=eos[0] if eos else [])
    sup = specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=ids.shape[0]), topk=2, frontier=2,
                                max_depth=5, early_stop=arch != "mistral", online=False)
    backlogs = plan_schedule(sup, SCHEDULE)
    out = generate_with(target, sup, ids, mask, 24, eos)
    assert torch.equal(out.sequences, ref), f"{arch} {case}"
    # Six plain steps of one token each, then the root: caught up in one forward (the first step's backlog
    # is the prompt's prefill, queued until the draft first runs).
    assert max(backlogs[1:]) >= 7 and backlogs[0] >= ids.shape[1] - 1
    assert out.stats.plan.steps_ar >= 10 and out.stats.plan.steps_drafted >= 3


@pytest.mark.hf
@pytest.mark.parametrize("case", ["batch1", "ragged3"])
def test_identity_after_a_plain_stretch_longer_than_the_backlog_buffer(models, case):
    """Twenty plain steps in a row outgrow the draft's backlog buffer (16 columns here): plain steps append
    one token a row by their own path, which must grow the buffer and keep every row's tokens in order."""
    arch, target, draft = models
    ids, mask = ragged_prompts([7] if case == "batch1" else [6, 10, 9], seed=4)
    ref = reference(target, ids, mask, 28, eos=[])
    sup = specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=ids.shape[0]), topk=2, frontier=2,
                                max_depth=5, online=False)
    backlogs = plan_schedule(sup, [3] + [0] * 20 + [2, 0, 3])
    out = generate_with(target, sup, ids, mask, 28, [])
    assert torch.equal(out.sequences, ref), f"{arch} {case}"
    assert max(backlogs[1:]) >= 21 and sup.runner._pending.shape[1] > 16  # the buffer grew


def test_profile_source_fits_the_running_batch_size():
    target = make_model("llama")
    prof = synthetic_profile(batch_sizes=(1, 4), scales=(1.0, 2.0))
    sup = specdec.SmartSupplier(perturbed(target), prof, topk=2, frontier=2, max_depth=3)
    ids, mask = ragged_prompts([4, 6, 5])
    generate_with(target, sup, ids, mask, 3)
    model = sup.planner.costs.model
    assert model.batch_size == 3 and model.batch_rule == "interpolated between 1 and 4"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"alpha": 0}, ValueError, "alpha: expected a number > 0"),
    ({"margin": -1}, ValueError, "margin: expected a number > 0"),
    ({"budget": 0}, ValueError, "budget: expected None or an int >= 1"),
    ({"frontier": 0}, ValueError, "frontier: expected an int >= 1"),
    ({"probe_every": 0}, ValueError, "probe_every: expected an int >= 1"),
    ({"benefit": "max"}, ValueError, "benefit: 'max' is not one of"),
    ({"selection": "best"}, ValueError, "selection: 'best' is not one of"),
    ({"topk": VOCAB + 1}, ValueError, "topk: 97 exceeds the draft's vocabulary"),
    ({"cost_model": {"c0": 1}}, TypeError, "cost_model: expected a CostModel or a Profile"),
])
def test_argument_errors(kwargs, error, message):
    draft = make_model("llama")
    kwargs = {"cost_model": fixed_cost(**MODERATE), **kwargs}
    with pytest.raises(error, match=message):
        specdec.SmartSupplier(draft, **kwargs)


def test_cost_model_fitted_at_another_batch_size_warns():
    target = make_model("llama")
    sup = specdec.SmartSupplier(target, fixed_cost(**MODERATE, batch_size=8))
    ids, mask = ragged_prompts([5])
    with pytest.warns(UserWarning, match="fitted at batch size 8, running at 1"):
        sup.start(state_for(ids, mask))
    assert sup.planner.costs.model.batch_size == 8


def test_reprofile_measures_a_batch_size_outside_the_profile():
    target = make_model("llama")
    prof = replace(synthetic_profile(batch_sizes=(1, 2), scales=(1.0, 2.0), sizes=(1, 2, 4)), context_len=16,
                   repeats=1)
    sup = specdec.SmartSupplier(perturbed(target), prof, topk=2, frontier=2, max_depth=3, reprofile=True)
    ids, mask = ragged_prompts([4, 6, 5])
    out = generate_with(target, sup, ids, mask, 3)
    assert torch.equal(out.sequences, reference(target, ids, mask, 3, eos=[]))
    assert sup.source.batch_sizes == (1, 2, 3) and sup.source.verify_seconds[:2] == prof.verify_seconds
    assert all(t > 0 for t in sup.source.verify_seconds[2]) and sup.planner.costs.model.batch_rule == "profiled"


def test_bench_variants_parse_and_fit_batch_pins_the_cost_model():
    from specdec.app.harness import make_supplier, smart_variant

    assert smart_variant("default") == {}
    assert smart_variant("alpha=0.5,budget=none,padding_aware=1,planner=0") == {
        "alpha": 0.5, "budget": None, "padding_aware": True, "planner": False}
    with pytest.raises(ValueError, match="smart_variants: 'alpha=x': 'x' is not a valid float"):
        smart_variant("alpha=x")
    assert smart_variant("window=none") == {"window": None} and smart_variant("window=32") == {"window": 32}
    with pytest.raises(ValueError, match="smart_variants: 'window=w'"):
        smart_variant("window=w")
    prof = synthetic_profile(batch_sizes=(1, 4), scales=(1.0, 2.0))
    sup = make_supplier("smart", make_model("llama"), cost=prof, smart=smart_variant("fit_batch=1,probe_every=8"))
    assert isinstance(sup.source, CostModel) and sup.source.batch_size == 1 and sup.planner.probe_every == 8


def random_pricing(rng):
    """A calibration learned from random verdicts and a random verify curve (steeper ones reject more)."""
    import numpy as np

    from specdec.estimates import Calibration

    calibration = Calibration()
    p = rng.random(200)
    calibration.observe(p, rng.random(200) < p ** 0.5)
    steep = float(rng.choice([1.0, 30.0, 300.0]))
    verify = np.maximum.accumulate(rng.random(80) * 2e-3) + np.linspace(4e-3, 4e-3 + 5e-3 * steep, 80)
    return calibration, verify


def random_children(rng, B: int, width: int, k: int):
    """Log-probabilities [B, width, k] float32 of a frontier's top-k children, exact ties now and then."""
    import numpy as np

    logits = rng.normal(size=(B, width, k + 3)) * rng.choice([0.3, 3.0])
    logits[..., 1] = logits[..., 0] if rng.random() < 0.3 else logits[..., 1]
    return (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)[..., :k]


@pytest.mark.parametrize("paper", [False, True])
@pytest.mark.parametrize("batch", [False, True])
def test_the_small_host_tree_is_the_numpy_one_to_the_bit(paper, batch):
    """`HostTree.grow` runs the rule in Python floats for a layer of at most `SMALL` candidates; on random
    layers of 1-6 rows (ties, dead frontier slots, rows of different sizes under and past the padded width,
    budgets that cut a layer, calibrations learned from random verdicts) it builds the trees, their
    bookkeeping and their frontier exactly as the numpy version does, with the row rule and the batch rule."""
    import numpy as np

    from specdec.suppliers.smart_host import SMALL, HostTree
    from specdec.suppliers.smart_rule import Rule

    rng = np.random.default_rng(7)
    layers, ragged = 0, 0
    for case in range(300):
        calibration, verify = random_pricing(rng)
        budget, k, B = int(rng.integers(3, 40)), int(rng.integers(1, 5)), int(rng.integers(1, 7))
        fast, slow = (HostTree(np.full(B, 5), budget) for _ in range(2))
        width, first = 1, 0
        for depth in range(int(rng.integers(1, 7))):
            logp = random_children(rng, B, width, k)
            tokens = np.stack([rng.permutation(50)[: width * k] for _ in range(B)]).reshape(B, width, k)
            # the batch rule keeps rows of one size aligned: a row-rule layer now and then makes them ragged
            rule = Rule(float(rng.choice([0.5, 1.0])), calibration, verify, float(rng.random() * 5e-3), budget,
                        paper, batch and rng.random() < 0.7)
            ragged += B > 1 and len(set(slow.size.tolist())) > 1 and rule.batch == batch
            grow = fast.grow if tokens.size <= SMALL else fast._grow_small  # up to SMALL: what grow runs
            want, got = slow._grow_rows(tokens, logp, rule), grow(tokens, logp, rule)
            layers += 1
            assert np.array_equal(want, got), (case, depth)
            for name in ("tokens", "parents", "logp", "edge", "cal", "size", "depth", "length", "paths",
                         "_first_new", "_cand_tok", "_cand_slot", "_keep_mask"):
                assert np.array_equal(getattr(slow, name), getattr(fast, name)), (case, depth, name)
            if not got.any():
                break
            width = int(rng.integers(1, min(int((got > 0).sum(1).max()), 3) + 1))  # at most the nodes kept
            assert all(np.array_equal(a, b) for a, b in zip(slow.frontier(width, first), fast.frontier(width, first)))
            first += 1
    assert layers > 300 and ragged > 30  # layers of ragged rows under the rule tested (the row rule: every B > 1)


def test_candidates_over_a_draft_vocabulary_are_the_widened_ones():
    """`candidates` over an EAGLE-3 head's draft vocabulary (its ids mapped on the host) picks the same children,
    in the same order, as over the logits widened to the target's vocabulary, ties included (two of the
    largest equal, or equal at the cut: the widened path decides, breaking them by target id); the
    log-probabilities agree to rounding (a softmax over V' columns, not V with -inf)."""
    import numpy as np

    from specdec.suppliers.smart_host import candidates

    gen = torch.Generator().manual_seed(3)
    ids = torch.sort(torch.randperm(50, generator=gen)[:20]).values  # the draft's 20 target ids of 50
    widen = lambda x: x.new_full((*x.shape[:-1], 50), float("-inf")).index_copy_(-1, ids, x)  # noqa: E731
    vocab, tied = (ids.numpy(), widen), 0
    for case in range(60):
        B, w, k = (int(v) for v in torch.randint(1, 5, (3,), generator=gen))
        x = torch.randn(B, w, 20, generator=gen) * 3
        if case % 3 == 0:  # a tie among the largest, or at the cut
            top = torch.topk(x, k + 1, dim=-1).indices
            j = int(torch.randint(0, k, (1,), generator=gen))
            x.scatter_(-1, top[..., j + 1:j + 2], x.gather(-1, top[..., j:j + 1]))
            tied += 1
        want_tok, want_logp = candidates(widen(x), k)
        got_tok, got_logp = candidates(x, k, vocab)
        assert np.array_equal(got_tok, want_tok), case
        assert np.allclose(got_logp, want_logp, rtol=0, atol=1e-6), case
        assert set(got_tok.ravel().tolist()) <= set(ids.tolist())
    assert tied == 20


@pytest.mark.parametrize("paper", [False, True])
@pytest.mark.parametrize("batch", [False, True])
def test_the_pooled_selection_is_the_rule_over_the_pool_in_probability_order(paper, batch):
    """`PoolTree` (selection="global") keeps each row's longest prefix of its pooled candidates, in calibrated
    probability order, that passes the rule: on random pools of 1-5 rows over 1-5 layers (ties, dead frontier
    slots, budgets that cut the pool) its counts are those of the numpy rule (`HostTree._keep`, the batch rule
    included) on a tree holding only the root, and the tree it returns holds every node's parent before it,
    with each node's token, path log-probability and depth."""
    import numpy as np

    from specdec.suppliers.smart_host import HostTree, PoolTree
    from specdec.suppliers.smart_rule import Rule

    rng = np.random.default_rng(11)
    checked, deep = 0, 0
    for case in range(200):
        calibration, verify = random_pricing(rng)
        budget, k, B = int(rng.integers(3, 40)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        rule = Rule(float(rng.choice([0.5, 1.0])), calibration, verify, float(rng.random() * 5e-3), budget, paper,
                    batch)
        pool = PoolTree(np.full(B, 5))
        width, first = 1, 0
        for depth in range(int(rng.integers(1, 6))):
            logp = random_children(rng, B, width, k)
            tokens = rng.integers(0, 50, size=(B, width, k))
            pool.add(tokens, logp, calibration)
            pool.select(rule)
            cal = np.array(pool.cal)
            order = np.argsort(-cal, axis=1, kind="stable")
            rows = np.arange(B)[:, None]
            want = HostTree(np.full(B, 5), budget)._keep(cal[rows, order], np.array(pool.parents)[rows, order], rule)
            assert pool.kept == want.sum(1).tolist(), (case, depth)
            assert np.allclose(pool.length, 1 + np.where(want, cal[rows, order], 0).sum(1))
            checked += 1
            deep += depth > 0 and any(pool.layer[b][i] > 1 for b in range(B) for i in pool._order[b][:pool.kept[b]])
            tok, par, lp, edge, size, row_depth = pool.tree()
            for b in range(B):
                assert par[b, 0] == -1 and tok[b, 0] == 5
                for j in range(1, int(size[b])):
                    i = pool._order[b][j - 1]
                    assert 0 <= par[b, j] < j  # the parent is in the tree, before the node
                    assert tok[b, j] == pool.tokens[b][i] and lp[b, j] == np.float32(pool.logp[b][i])
                    parent = pool.parents[b][i]
                    assert par[b, j] == (0 if parent == 0 else 1 + pool._order[b].index(parent - 1))
                assert row_depth[b] == max([pool.layer[b][i] for i in pool._order[b][:pool.kept[b]]], default=0)
            if not pool.newest_active():
                break
            width = int(rng.integers(1, 4))
            front, parent, bounds = pool.frontier(width, first, k)
            assert front.shape == parent.shape == (B, width) and len(bounds) == width
            first += 1
    assert checked > 400 and deep > 50  # pools of several layers, trees reaching past the first


def test_a_pool_drafted_at_once_is_the_pool_grown_layer_by_layer():
    """``early_stop=False`` with the global selection drafts every layer on the device and brings the pool
    to the host at once (`PoolTree.from_layers`): on random layers (frontiers of any of the previous layer's
    candidates, 1-5 rows, 1-5 layers) its pool is the one `PoolTree.add` grows layer by layer over the same
    frontiers, to the bit, and the rule keeps the same prefixes."""
    import numpy as np

    from specdec.suppliers.smart_host import PoolTree
    from specdec.suppliers.smart_rule import Rule

    rng = np.random.default_rng(5)
    for case in range(100):
        calibration, verify = random_pricing(rng)
        B, k, layers = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
        root = rng.integers(0, 50, size=B)
        grown = PoolTree(root)
        parts, sizes, width, first, previous = [], [], 1, 0, 0
        parent = np.full((B, k), -1)
        for depth in range(layers):
            logp = random_children(rng, B, width, k)
            tokens = rng.integers(0, 50, size=(B, width, k))
            grown.add(tokens, logp, calibration)
            parts.append(np.stack([tokens.reshape(B, -1), logp.reshape(B, -1), parent]).astype(np.float64))
            sizes.append(width * k)
            previous, first = first, first + width * k
            width = int(rng.integers(1, width * k + 1))
            best = np.stack([rng.permutation(sizes[-1])[:width] for _ in range(B)])  # the next frontier
            grown.front = [[previous + int(i) + 1 for i in row] for row in best]
            parent = np.repeat(best, k, axis=1)
        at_once = PoolTree.from_layers(root, np.concatenate(parts, 2), sizes, calibration)
        for field in ("tokens", "parents", "logp", "edge", "cal", "layer"):
            assert getattr(at_once, field) == getattr(grown, field), (case, field)
        rule = Rule(0.8, calibration, verify, float(rng.random() * 5e-3), int(rng.integers(3, 40)), False, B > 1)
        assert at_once.select(rule) == grown.select(rule) and at_once.kept == grown.kept
