"""K2 smart_expand: the reference on hand-worked cases, the Triton kernel against it, argument checks."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from specdec.ops._backend import triton_runnable
from specdec.ops.smart_expand import smart_cost, smart_expand, smart_expand_ref
from tests.kernel_inputs import assert_same_expansion, expand_case

INF = float("-inf")
needs_triton = pytest.mark.skipif(not triton_runnable(torch.device("cuda" if torch.cuda.is_available() else "cpu")),
                                  reason="triton cannot run here (no CUDA device and no TRITON_INTERPRET=1)")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# The module, not the function that specdec.ops exports under the same name.
se = importlib.import_module("specdec.ops.smart_expand")


@pytest.fixture
def small_tiles(monkeypatch):
    """Vocabulary tiles of 32 so that tiny vocabularies still cross several tiles under the interpreter."""
    if DEVICE == "cpu":
        monkeypatch.setattr(se, "BLOCK_V", 32)


# --------------------------------------------------------------------------- the reference, by hand

def hand_case(num_paths: int) -> dict:
    """Root-only tree; frontier slot 0 is the root with children 0..3 of probability 0.5, 0.3, 0.15, 0.05;
    slot 1 is inactive. C(n) = 1 + 0.1 n, dC = 0.1 (gamma = 0)."""
    root = torch.tensor([0.5, 0.3, 0.15, 0.05]).log() + 2.0  # any shift: log-softmax removes it
    logits = torch.stack([root, torch.tensor([9.0, 8.0, 7.0, 6.0])])[None]  # [1, 2, 4]
    return dict(logits=logits, frontier_logp=torch.tensor([[0.0, INF]]), tree_size=torch.tensor([1]),
                expected_len=torch.tensor([1.0]), num_paths=torch.tensor([num_paths]),
                cost=torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0]))


@pytest.mark.parametrize("benefit, num_paths, budget, kept", [
    # j=0: 1*0.5/0.1 = 5 > 1/1.1; j=1: 3 > 1.5/1.2; j=2: 1.5 > 1.8/1.3 = 1.385; j=3: 0.5 < 1.95/1.4 -> stop
    ("expected", 1, 100, 3),
    # paper, 2 paths: j=0: 0.25/0.1 = 2.5 > 0.909; j=1: 1.5 > 1.25; j=2: 0.75 < 1.385 -> stop
    ("paper", 2, 100, 2),
    # expected, budget 3: j=2 has |T|_2 + 1 = 4 > 3 -> stop although the ratio test passes
    ("expected", 1, 3, 2),
    # budget 1: the root alone already fills it
    ("expected", 1, 1, 0),
])
def test_ref_hand_worked(benefit, num_paths, budget, kept):
    out = smart_expand_ref(**hand_case(num_paths), k=4, alpha=1.0, budget=budget, benefit=benefit)
    assert out.tokens.tolist() == [[0, 1, 2, 3, -1, -1, -1, -1]]
    assert out.parent_slot.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    torch.testing.assert_close(out.logp[0, :4].exp(), torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert (out.logp[0, 4:] == INF).all()
    assert out.keep.tolist() == [[j < kept for j in range(8)]]
    assert out.tree_size.tolist() == [1 + kept]
    torch.testing.assert_close(out.expected_len, torch.tensor([1.0 + sum([0.5, 0.3, 0.15][:kept])]))


def test_smart_cost_by_hand_and_derivative():
    cost = torch.tensor([0.5, 0.1, 0.2, 0.05, 1.5])
    value, slope = smart_cost(cost, torch.tensor([4.0]))
    # n^rho = 8, exp(0.4) = 1.49182: C = 0.5 + 0.4 + 0.2 * 0.49182; dC = 0.1 + 0.2 * 0.05 * 1.5 * 2 * 1.49182
    torch.testing.assert_close(value, torch.tensor([0.5 + 0.4 + 0.2 * (math.exp(0.4) - 1)]))
    torch.testing.assert_close(slope, torch.tensor([0.1 + 0.03 * math.exp(0.4)]))
    n = torch.tensor([1.0, 3.0, 17.0, 60.0], dtype=torch.float64)
    h = 1e-5
    numeric = (smart_cost(cost.double(), n + h)[0] - smart_cost(cost.double(), n - h)[0]) / (2 * h)
    torch.testing.assert_close(smart_cost(cost.double(), n)[1], numeric, atol=1e-6, rtol=1e-6)


def test_ref_ties_break_by_token_then_candidate():
    # Tokens 1 and 3 share the top logit (1 ranks first), tokens 0 and 4 the third (0 is taken). Slot 1 is
    # a copy of slot 0 at the same path log-prob: equal path log-probs keep candidate order f * k + r.
    row = torch.tensor([0.0, 2.0, -1.0, 2.0, 0.0])
    out = smart_expand_ref(row.expand(1, 2, 5), torch.zeros(1, 2), torch.tensor([1]), torch.tensor([1.0]),
                           torch.tensor([1]), torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0]), k=3, alpha=1.0, budget=99)
    assert out.tokens.tolist() == [[1, 3, 1, 3, 0, 0]]
    assert out.parent_slot.tolist() == [[0, 0, 1, 1, 0, 1]]


def test_ref_structure():
    c = expand_case(3, 5, 50, seed=1)
    out = smart_expand_ref(**c, k=4, alpha=0.8, budget=12)
    B, FK = out.tokens.shape
    assert (B, FK) == (3, 20)
    assert (out.logp[:, :-1] >= out.logp[:, 1:]).all()  # sorted
    kept = out.keep.sum(-1)
    assert torch.equal(out.keep, torch.arange(FK) < kept[:, None])  # a prefix
    assert torch.equal(out.tree_size, c["tree_size"] + kept)
    assert (out.tree_size <= 12).all()
    inactive = c["frontier_logp"].gather(1, out.parent_slot) == INF
    assert torch.equal(inactive, out.logp == INF) and (out.tokens[inactive] == -1).all()
    assert not (out.keep & inactive).any()


# --------------------------------------------------------------------------- the Triton kernel

@needs_triton
@pytest.mark.parametrize("dtype, atol, rtol", [(torch.float32, 2e-6, 1e-6), (torch.float16, 2e-6, 1e-6)])
@pytest.mark.parametrize("V", [50, 97, 130])
@pytest.mark.parametrize("benefit", ["paper", "expected"])
def test_triton_matches_ref(small_tiles, dtype, atol, rtol, V, benefit):
    c = expand_case(3, 4, V, seed=V, dtype=dtype)
    args = dict(k=3, alpha=0.8, budget=10, benefit=benefit)
    ref = smart_expand_ref(**c, **args)
    assert ref.keep.any() and not ref.keep.all()  # the prefix test decides somewhere inside the rows
    assert_same_expansion(smart_expand(**c, **args, backend="triton"), ref, atol=atol, rtol=rtol)


@needs_triton
def test_triton_budget_mid_row_and_noncontiguous(small_tiles):
    c = expand_case(2, 3, 97, seed=5, scale=2.0, inactive=0.0)
    c["logits"] = c["logits"].transpose(1, 2).contiguous().transpose(1, 2)  # V-stride 3
    c["tree_size"] = torch.tensor([1, 3], device=DEVICE)
    c["cost"] = torch.tensor([1.0, 0.001, 0.0, 0.0, 1.0], device=DEVICE)  # cheap: only the budget stops
    args = dict(k=4, alpha=1.0, budget=6, benefit="expected")
    ref = smart_expand_ref(**c, **args)
    assert (ref.tree_size == 6).all()
    assert_same_expansion(smart_expand(**c, **args, backend="triton"), ref, atol=2e-6, rtol=1e-6)


@needs_triton
def test_triton_exact_ties(small_tiles):
    # Logits in {0, 1, 2}: many equal logits inside a slot, and slots 0 and 2 identical at the same path
    # log-prob, so ties decide the order everywhere; slot 3 is inactive.
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(0, 3, (2, 4, 70), generator=gen).float()
    logits[:, 2] = logits[:, 0]
    flogp = torch.tensor([[-0.5, -1.0, -0.5, INF], [-0.25, -0.25, -0.25, INF]])
    logits[1, 1] = logits[1, 0]
    c = dict(logits=logits.to(DEVICE), frontier_logp=flogp.to(DEVICE), tree_size=torch.tensor([1, 3], device=DEVICE),
             expected_len=torch.tensor([1.0, 1.5], device=DEVICE), num_paths=torch.tensor([1, 2], device=DEVICE),
             cost=torch.tensor([1.0, 0.004, 0.0, 0.0, 1.0], device=DEVICE))
    for benefit in ("paper", "expected"):
        ref = smart_expand_ref(**c, k=5, alpha=0.8, budget=20, benefit=benefit)
        assert ref.keep.any() and not ref.keep.all()
        out = smart_expand(**c, k=5, alpha=0.8, budget=20, benefit=benefit, backend="triton")
        assert_same_expansion(out, ref, atol=2e-6, rtol=1e-6)  # the log-sum-exp may differ in the last bit


@needs_triton
def test_triton_topk_across_tiles(small_tiles):
    # Ascending logits: every tile displaces the whole running top-k; descending: no later tile enters;
    # a V shape and a k larger than a tile (k 40 > 32) mix both.
    V = 130
    ramp = torch.arange(V, dtype=torch.float32) / 10
    logits = torch.stack([ramp, ramp.flip(0), (ramp - 6.5).abs()])[None]  # [1, 3, V]
    c = dict(logits=logits.to(DEVICE), frontier_logp=torch.zeros(1, 3, device=DEVICE),
             tree_size=torch.tensor([1], device=DEVICE), expected_len=torch.tensor([1.0], device=DEVICE),
             num_paths=torch.tensor([1], device=DEVICE), cost=torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0], device=DEVICE))
    for k in (5, 40):
        ref = smart_expand_ref(**c, k=k, alpha=0.8, budget=500)
        assert_same_expansion(smart_expand(**c, k=k, alpha=0.8, budget=500, backend="triton"), ref, atol=2e-6, rtol=1e-6)
    assert sorted(ref.tokens[0, :2].tolist()) == [0, 129]  # the best children of the two ramps


@needs_triton
def test_triton_one_hot_exact(small_tiles):
    # A single finite logit per slot: its child has log-prob exactly 0, so every path log-prob is exact.
    B, F, V, k = 2, 3, 130, 2
    hot = torch.tensor([[7, 129, 0], [64, 64, 3]])
    logits = torch.full((B, F, V), INF).scatter(2, hot[:, :, None], 0.0)
    flogp = torch.tensor([[-0.1, -0.7, -0.3], [-0.2, INF, -2.5]])
    c = dict(logits=logits.to(DEVICE), frontier_logp=flogp.to(DEVICE), tree_size=torch.tensor([1, 4], device=DEVICE),
             expected_len=torch.tensor([1.0, 2.0], device=DEVICE), num_paths=torch.tensor([1, 1], device=DEVICE),
             cost=torch.tensor([1.0, 0.1, 0.0, 0.0, 1.0], device=DEVICE))
    out = smart_expand(**c, k=k, alpha=1.0, budget=50, benefit="expected", backend="triton")
    assert out.tokens.tolist() == [[7, 0, 129, 0, 0, 1], [64, 3, 0, -1, -1, 0]]  # -inf children: lowest ids
    assert out.parent_slot.tolist() == [[0, 2, 1, 0, 1, 2], [0, 2, 0, 1, 1, 2]]
    expect = torch.tensor([[-0.1, -0.3, -0.7, INF, INF, INF], [-0.2, -2.5, INF, INF, INF, INF]])
    assert torch.equal(out.logp.cpu(), expect)
    # row 0: P = 0.905, 0.741, 0.497; L/C: 1/1.1, 1.905/1.2, 2.646/1.3 -> all three pass (ratio P/0.1)
    # row 1: P = 0.819 passes (8.19 > 2/1.4); P = 0.082: 0.82 < 2.819/1.5 -> stop
    assert out.keep.sum(-1).tolist() == [3, 1]
    # logp is exact (checked above); expected_len sums exp(logp), and a GPU's tl.exp (ex2.approx) may differ
    # from torch's exp in the last bit.
    assert_same_expansion(out, smart_expand_ref(**c, k=k, alpha=1.0, budget=50, benefit="expected"), atol=0.0, rtol=1e-6)


@needs_triton
def test_triton_empty_frontier(small_tiles):
    c = expand_case(2, 2, 50)
    c["frontier_logp"] = torch.full((2, 2), INF, device=DEVICE)
    out = smart_expand(**c, k=2, alpha=0.8, budget=10, backend="triton")
    assert not out.keep.any() and (out.tokens == -1).all()
    assert torch.equal(out.tree_size, c["tree_size"].to(torch.int64))
    assert torch.equal(out.expected_len, c["expected_len"])


# --------------------------------------------------------------------------- argument checks

@pytest.mark.parametrize("change, error, match", [
    (dict(k=0), ValueError, "k: expected an int in"),
    (dict(k=51), ValueError, "k: expected an int in"),
    (dict(alpha=0.0), ValueError, "alpha: expected a number > 0"),
    (dict(budget=0), ValueError, "budget: expected an int >= 1"),
    (dict(benefit="greedy"), ValueError, "benefit: 'greedy' is not one of"),
    (dict(backend="cuda-graphs"), ValueError, "backend: 'cuda-graphs'"),
    (dict(logits=torch.zeros(2, 50)), ValueError, r"logits: expected \[B, F, V\]"),
    (dict(logits=torch.zeros(2, 3, 50, dtype=torch.int64)), TypeError, "logits: expected fp16/bf16/fp32"),
    (dict(frontier_logp=torch.zeros(2, 4)), ValueError, r"frontier_logp: expected shape \[2, 3\]"),
    (dict(frontier_logp=torch.zeros(2, 3, dtype=torch.float64)), TypeError, "frontier_logp: expected one of"),
    (dict(tree_size=torch.ones(2)), TypeError, "tree_size: expected one of"),
    (dict(expected_len=torch.ones(3)), ValueError, r"expected_len: expected shape \[2\]"),
    (dict(num_paths=torch.ones(2, dtype=torch.float16)), TypeError, "num_paths: expected one of"),
    (dict(cost=torch.ones(4)), ValueError, r"cost: expected shape \[5\]"),
])
def test_bad_arguments(change, error, match):
    c = {**expand_case(2, 3, 50), "k": 2, "alpha": 0.8, "budget": 8}
    c = {key: value.cpu() if isinstance(value, torch.Tensor) else value for key, value in c.items()}
    with pytest.raises(error, match=match):
        smart_expand(**{**c, **change})


@pytest.mark.gpu
def test_bad_device():
    c = {**expand_case(2, 3, 50), "k": 2, "alpha": 0.8, "budget": 8}
    with pytest.raises(ValueError, match="cost: on cpu"):
        smart_expand(**{**c, "cost": c["cost"].cpu()})


# --------------------------------------------------------------------------- real sizes on a GPU

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("benefit", ["paper", "expected"])
def test_gpu_real_size(dtype, benefit):
    c = expand_case(32, 64, 32000, seed=11, dtype=dtype, scale=4.0)
    args = dict(k=8, alpha=0.8, budget=64, benefit=benefit)
    ref = smart_expand_ref(**c, **args)
    out = smart_expand(**c, **args, backend="triton")
    # The kernel's log-sum-exp differs from torch's by an ulp or so, which may swap two candidates whose
    # path log-probs are that close (then tokens differ at those positions only) or flip a keep decision
    # that sits on the boundary. Sorted log-probs are immune to swaps.
    torch.testing.assert_close(out.logp, ref.logp, atol=1e-5, rtol=1e-5)
    near = torch.zeros_like(ref.keep)
    gap = (ref.logp[:, 1:] - ref.logp[:, :-1]).abs() <= 1e-5
    near[:, 1:] |= gap
    near[:, :-1] |= gap
    differ = (out.tokens != ref.tokens) | (out.parent_slot != ref.parent_slot)
    assert not (differ & ~near).any()
    assert ((out.tree_size - ref.tree_size).abs() <= 1).all()
    assert (out.tree_size == ref.tree_size).float().mean() > 0.9


@pytest.mark.parametrize("values", ["distinct", "ties", "signed_zeros"])
def test_top_children_matches_the_key_order_on_cpu(values):
    """The CPU path of `_top_children` (topk over floats; sorting only where the k + 1 largest hold a tie)
    returns exactly the key reference's children: value descending, index ascending, -0.0 as +0.0."""
    from specdec.ops.smart_expand import _desc_key, _top_children

    g = torch.Generator().manual_seed(7)
    for _ in range(300):
        shape = tuple(int(torch.randint(lo, hi, (1,), generator=g)) for lo, hi in ((1, 4), (1, 5), (3, 40)))
        k = int(torch.randint(1, min(8, shape[-1]), (1,), generator=g))
        x = torch.randn(shape, generator=g)
        if values == "ties":
            x = torch.randint(-3, 3, shape, generator=g).float()
        elif values == "signed_zeros":
            x = torch.where(torch.rand(shape, generator=g) < 0.3, torch.tensor(-0.0), torch.where(x > 0, x, 0.0))
        assert torch.equal(_top_children(x, k), torch.topk(_desc_key(x), k, dim=-1).indices), (shape, k)
