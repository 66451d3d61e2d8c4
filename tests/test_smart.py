"""SmartSupplier: trees equal a plain-Python SMART, budget and cost extremes, output identity, online refit."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

import specdec
from conftest import ARCHS, VOCAB, make_model, perturbed, ragged_prompts
from specdec.cost import CostModel
from specdec.profiling import device_name
from specdec.state import DecodeState
from test_cost import synthetic_profile
from test_generate import reference


def fixed_cost(c0: float, lam: float, gamma: float, delta: float, rho: float, batch_size: int = 1) -> CostModel:
    """A cost model with given coefficients (the fit is tested in test_cost.py)."""
    sizes = (1, 2, 4)
    return CostModel(c0, lam, gamma, delta, rho, "intercept", c0 + gamma * math.expm1(delta), batch_size, 512,
                     "profiled", device_name(torch.device("cpu")), "float32", "", "", sizes, (1.0, 1.0, 1.0), None,
                     {"paper": [0.0, lam, gamma, delta, rho], "intercept": [c0, lam, gamma, delta, rho]},
                     {"paper": 0.1, "intercept": 0.1})


# C(1) = 10 ms, growing ~1% per node at first and steeply past ~60 nodes: SMART's trees of 5-20 nodes.
MODERATE = dict(c0=0.01, lam=1e-5, gamma=2e-4, delta=0.05, rho=1.0)


def state_for(ids, mask, capacity=96):
    return DecodeState.begin(ids, (mask == 0).sum(1), max_new_tokens=8, capacity=capacity, eos_token_ids=[],
                             pad_token_id=0)


def first_tree(target, draft, cost, lengths, **kw):
    ids, mask = ragged_prompts(lengths, seed=5)
    sup = specdec.SmartSupplier(draft, replace(cost, batch_size=len(lengths)), **kw)
    sup.attach(target)
    state = state_for(ids, mask)
    sup.start(state)
    tree = sup.propose(state)
    tree.validate(vocab_size=VOCAB)
    return ids, mask, sup, tree


def python_smart(draft, context: list[int], cost: list[float], *, k: int, frontier: int, alpha: float,
                 budget: int, max_depth: int, benefit: str) -> tuple[list[int], list[int]]:
    """SMART's layer-by-layer rule for one row, in plain Python (float64), with full-context draft forwards."""
    c0, lam, gamma, delta, rho = cost
    C = lambda n: c0 + lam * n + gamma * math.expm1(delta * n ** rho)  # noqa: E731
    dC = lambda n: lam + gamma * delta * rho * n ** (rho - 1) * math.exp(delta * n ** rho)  # noqa: E731
    tokens, parents = [context[-1]], [-1]
    size, L, leaves = 1, 1.0, 1
    front = [(0, [], 0.0)]  # (tree node, path tokens after the root, path log-prob)
    for _ in range(max_depth):
        cands = []
        for f, (node, path, lp) in enumerate(front):
            logits = draft(torch.tensor([context + path])).logits[0, -1].double()
            logsm = torch.log_softmax(logits, -1).tolist()
            best = sorted(range(len(logsm)), key=lambda t: (-logits[t].item(), t))[:k]
            cands += [(lp + logsm[t], f * k + r, t, f) for r, t in enumerate(best)]
        cands.sort(key=lambda c: (-c[0], c[1]))
        kept = []
        for j, (lp, _, t, f) in enumerate(cands):
            n, p = size + j, math.exp(lp)
            gain = p / leaves if benefit == "paper" else p
            L_j = L + sum(math.exp(c[0]) for c in kept)
            if not (alpha * gain / dC(n) > L_j / C(n) and n + 1 <= budget):
                break
            kept.append((lp, _, t, f))
        if not kept:
            break
        leaves += len(kept) - len({c[3] for c in kept})
        L += sum(math.exp(c[0]) for c in kept)
        new_front = []
        for lp, _, t, f in kept:
            tokens.append(t)
            parents.append(front[f][0])
            if len(new_front) < frontier:
                new_front.append((len(tokens) - 1, front[f][1] + [t], lp))
        size += len(kept)
        front = new_front
    return tokens, parents


@pytest.mark.parametrize("benefit, k, frontier, alpha", [("paper", 3, 2, 0.8), ("expected", 3, 4, 0.5)])
def test_trees_equal_plain_python_smart(benefit, k, frontier, alpha):
    target = make_model("llama")
    draft = perturbed(target)
    cost = fixed_cost(**MODERATE)
    ids, mask, sup, tree = first_tree(target, draft, cost, [6, 9], topk=k, frontier=frontier, alpha=alpha,
                                      max_depth=4, benefit=benefit)
    sizes = tree.num_nodes.tolist()
    assert max(sizes) > 3  # the trees grew past the first layer's children
    for b in range(2):
        context = ids[b][mask[b] == 1].tolist()
        want_tok, want_par = python_smart(draft, context, cost.coefficients, k=k, frontier=frontier, alpha=alpha,
                                          budget=sup.budget, max_depth=4, benefit=benefit)
        n = sizes[b]
        assert tree.tokens[b, :n].tolist() == want_tok, f"row {b}"
        assert tree.parents[b, :n].tolist() == want_par, f"row {b}"


def test_nearly_free_verification_grows_to_the_budget():
    target = make_model("qwen2")
    free = fixed_cost(c0=1.0, lam=1e-9, gamma=1e-9, delta=1e-3, rho=1.0)
    _, _, sup, tree = first_tree(target, perturbed(target), free, [5, 8, 3], topk=3, frontier=3, budget=12)
    assert tree.num_nodes.tolist() == [12, 12, 12] and tree.size == 12 == sup.max_tree_size()
    _, _, sup, tree = first_tree(target, perturbed(target), free, [5], topk=2, frontier=2, max_depth=3)
    assert sup.max_tree_size() == 1 + 2 + 2 * 2 * 2  # budget None: capped by what the layers can hold
    assert tree.num_nodes.tolist() == [11]


def test_steep_cost_yields_the_root_alone_and_plain_decoding():
    target = make_model("qwen3")
    steep = fixed_cost(c0=0.0, lam=0.0, gamma=1.0, delta=5.0, rho=1.0, batch_size=2)  # dC(1)/C(1) ~ 5: nothing pays
    ids, mask, _, tree = first_tree(target, target, steep, [5, 8], topk=4, frontier=4, alpha=1.0)
    assert tree.size == 1 and tree.num_nodes.tolist() == [1, 1] and tree.max_depth == 0
    out = specdec.SpeculativeGenerator(target, specdec.SmartSupplier(target, steep)).generate(
        ids, attention_mask=mask, max_new_tokens=6, eos_token_id=[], pad_token_id=0)
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
    sup = specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=ids.shape[0]), alpha=alpha, topk=3,
                                frontier=3, max_depth=5,
                                padding_aware=case == 1 and arch == "llama", early_stop=arch != "qwen3")
    out = specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=20,
                                                             eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, ref), f"{arch} alpha {alpha}"
    assert out.stats.mean_tree_size > 2 and out.stats.mean_accepted_length > 1.0  # trees were built and used


@pytest.mark.hf
def test_identity_eos_mid_batch(models):
    arch, target, draft = models
    ids, mask = ragged_prompts([6, 10, 9], seed=3)
    free = reference(target, ids, mask, 20, eos=None)[:, ids.shape[1]:]
    eos = int(free[0, 4])
    ref = reference(target, ids, mask, 20, eos=eos)
    sup = specdec.SmartSupplier(draft, fixed_cost(**MODERATE, batch_size=3), alpha=ALPHAS[arch][2], topk=3,
                                frontier=2,
                                benefit="expected" if arch == "qwen2" else "paper")
    out = specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=20,
                                                             eos_token_id=eos, pad_token_id=0)
    assert torch.equal(out.sequences, ref), arch


def test_profile_source_fits_the_running_batch_size():
    target = make_model("llama")
    prof = synthetic_profile(batch_sizes=(1, 4), scales=(1.0, 2.0))
    sup = specdec.SmartSupplier(perturbed(target), prof, topk=2, frontier=2, max_depth=3)
    ids, mask = ragged_prompts([4, 6, 5])
    specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=3, eos_token_id=[],
                                                       pad_token_id=0)
    assert sup.cost_model.batch_size == 3 and sup.cost_model.batch_rule == "interpolated between 1 and 4"


def test_online_refit_rescales_verification_to_the_measured_times():
    target = make_model("llama")
    base = fixed_cost(**MODERATE)
    sup = specdec.SmartSupplier(perturbed(target), base, topk=2, frontier=2, refit_every=4)
    ids, mask = ragged_prompts([5])
    sup.attach(target)
    sup.start(state_for(ids, mask))
    for width in (1, 3, 5, 9):
        sup.record_verify(width, 3.0 * (base.predict(width) - base.lam * width))
    assert sup.cost_model.gamma == pytest.approx(3 * base.gamma) and sup.cost_model.c0 == pytest.approx(3 * base.c0)
    assert sup.cost_model.lam == base.lam and "rescaled x3" in sup.cost_model.batch_rule
    assert torch.allclose(sup._cost, sup.cost_model.as_tensor())
    sup.record_verify(4, 1.0)  # a window of 4 starts over: one observation changes nothing yet
    assert sup.cost_model.gamma == pytest.approx(3 * base.gamma)


def test_online_refit_runs_inside_generate():
    target = make_model("qwen2")
    sup = specdec.SmartSupplier(perturbed(target), fixed_cost(**MODERATE), topk=2, frontier=2, max_depth=4,
                                refit_every=2)
    ids, mask = ragged_prompts([7, 4])
    out = specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=12,
                                                             eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 12, eos=[]))
    assert "rescaled" in sup.cost_model.batch_rule  # measured verify times replaced the fixed model's level


@pytest.mark.parametrize("kwargs, error, message", [
    ({"alpha": 0}, ValueError, "alpha: expected a number > 0"),
    ({"budget": 0}, ValueError, "budget: expected None or an int >= 1"),
    ({"frontier": 0}, ValueError, "frontier: expected an int >= 1"),
    ({"benefit": "max"}, ValueError, "benefit: 'max' is not one of"),
    ({"refit_every": 0}, ValueError, "refit_every: expected None or an int >= 1"),
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
    assert np.isfinite(sup.cost_model.coefficients).all()


def test_reprofile_measures_a_batch_size_outside_the_profile():
    target = make_model("llama")
    prof = replace(synthetic_profile(batch_sizes=(1, 2), scales=(1.0, 2.0), sizes=(1, 2, 4)), context_len=16,
                   repeats=1)
    sup = specdec.SmartSupplier(perturbed(target), prof, topk=2, frontier=2, max_depth=3, reprofile=True)
    ids, mask = ragged_prompts([4, 6, 5])
    out = specdec.SpeculativeGenerator(target, sup).generate(ids, attention_mask=mask, max_new_tokens=3,
                                                             eos_token_id=[], pad_token_id=0)
    assert torch.equal(out.sequences, reference(target, ids, mask, 3, eos=[]))
    assert sup.source.batch_sizes == (1, 2, 3) and sup.source.verify_seconds[:2] == prof.verify_seconds
    assert all(t > 0 for t in sup.source.verify_seconds[2]) and sup.cost_model.batch_rule == "profiled"


def test_bench_variants_parse_and_fit_batch_pins_the_cost_model():
    from specdec.harness import make_supplier, smart_variant

    assert smart_variant("default") == {}
    assert smart_variant("alpha=0.5,budget=none,padding_aware=1") == {"alpha": 0.5, "budget": None,
                                                                      "padding_aware": True}
    with pytest.raises(ValueError, match="--smart-variants: 'alpha=x': 'x' is not a valid float"):
        smart_variant("alpha=x")
    prof = synthetic_profile(batch_sizes=(1, 4), scales=(1.0, 2.0))
    sup = make_supplier("smart", make_model("llama"), cost=prof, smart=smart_variant("fit_batch=1,refit_every=8"))
    assert isinstance(sup.source, CostModel) and sup.source.batch_size == 1 and sup.refit_every == 8
