"""The production torch path of tree attention (backend "sdpa"): SDPA over the live cache region, planned
once per forward, against the reference. The cache and tree shortcuts that keep plain decoding cheap are
tested in tests/core/test_cache.py and test_tree.py, the generation identity with each backend forced in
tests/core/test_generate.py."""

from __future__ import annotations


import numpy as np
import pytest
import torch

import specdec
from specdec import ops
from specdec.ops._backend import resolve_backend
from tests.helpers import make_tree


def inputs(B, Hq, Hkv, T, D, prefix, seed):
    """fp64 q [B, Hq, T, D], k/v [B, Hkv, S, D]; ragged rows: start and length differ per row."""
    gen = torch.Generator().manual_seed(seed)
    length = torch.tensor([max(prefix - 3 * b, 0) for b in range(B)])
    start = torch.minimum(torch.tensor([0, 2, 5][:B]), length)
    S = prefix + T + 6  # free slots after the tree region
    q, k, v = (torch.randn(shape, generator=gen, dtype=torch.float64)
               for shape in ((B, Hq, T, D), (B, Hkv, S, D), (B, Hkv, S, D)))
    return q, k, v, start, length


def live_plan(start, length, mask, T):
    """The plan a forward makes: only the live slots (longest row + tree region), built once."""
    kv_len = int(length.max()) + T
    return ops.sdpa_plan(start, length, mask, kv_len, host_start=start.numpy(), host_length=length.numpy())


@pytest.mark.parametrize("T", [1, 7, 33, 130])
@pytest.mark.parametrize("prefix", [0, 1, 45])
@pytest.mark.parametrize("Hq, Hkv", [(2, 2), (4, 2), (4, 1)])
@pytest.mark.parametrize("kind", ["chain", "star", "random"])
def test_sdpa_matches_reference_fp32(T, prefix, Hq, Hkv, kind):
    B, D = 3, 16
    tree = make_tree(kind, B, T, seed=T + prefix)
    q, k, v, start, length = inputs(B, Hq, Hkv, T, D, prefix, seed=T * 7 + prefix)
    q, k, v = q.float(), k.float(), v.float()
    mask = tree.ancestor_mask
    want = ops.tree_attention(q, k, v, start, length, mask, backend="torch")
    whole = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa")
    live = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa", plan=live_plan(start, length, mask, T))
    torch.testing.assert_close(whole, want, atol=2e-6, rtol=2e-6)
    torch.testing.assert_close(live, want, atol=2e-6, rtol=2e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("T, prefix, kind", [(1, 45, "chain"), (7, 0, "random"), (33, 45, "random"), (130, 1, "star")])
def test_sdpa_low_precision_within_twice_torch_error(dtype, T, prefix, kind):
    """docs/architecture.md's 2x rule: no worse than twice the error of the same computation done by torch in that dtype."""
    B, Hq, Hkv, D = 3, 4, 2, 32
    tree = make_tree(kind, B, T, seed=T)
    q64, k64, v64, start, length = inputs(B, Hq, Hkv, T, D, prefix, seed=T + 1)
    q, k, v = q64.to(dtype), k64.to(dtype), v64.to(dtype)
    mask = tree.ancestor_mask
    truth = ops.tree_attention_ref(q.double(), k.double(), v.double(), start, length, mask, scale=D**-0.5)
    torch_lp = ops.tree_attention_ref(q, k, v, start, length, mask, scale=D**-0.5, compute_dtype=dtype)
    ours = ops.tree_attention(q, k, v, start, length, mask, backend="sdpa", plan=live_plan(start, length, mask, T))
    assert ours.dtype == dtype and ours.shape == q.shape
    err_ours = (ours.double() - truth).abs().max().item()
    err_torch = (torch_lp.double() - truth).abs().max().item()
    assert err_ours <= 2 * err_torch, (err_ours, err_torch)


def test_live_region_never_reads_free_slots():
    B, H, T, D, P = 2, 2, 5, 8, 6
    tree = make_tree("random", B, T, seed=3)
    q, k, v, start, length = (t.float() if t.is_floating_point() else t for t in inputs(B, H, H, T, D, P, seed=0))
    plan = live_plan(start, length, tree.ancestor_mask, T)
    out = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="sdpa", plan=plan)
    k[:, :, plan.kv_len:] = float("nan")
    v[:, :, plan.kv_len:] = float("nan")
    again = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="sdpa", plan=plan)
    assert torch.equal(out, again)


def test_no_mask_for_root_only_steps_and_unpadded_prompts():
    B, Hq, Hkv, D = 3, 4, 2, 8
    gen = torch.Generator().manual_seed(0)
    k, v = torch.randn(B, Hkv, 40, D, generator=gen), torch.randn(B, Hkv, 40, D, generator=gen)
    zeros, host0 = torch.zeros(B, dtype=torch.int64), np.zeros(B, dtype=np.int64)
    # root-only step over equal, unpadded rows: every live slot is visible
    length = torch.full((B,), 11)
    root = torch.ones(B, 1, 1, dtype=torch.int32)
    plan = ops.sdpa_plan(zeros, length, root, 12, host_start=host0, host_length=length.numpy())
    assert plan.mask is None and plan.causal_rows == 0
    q = torch.randn(B, Hq, 1, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, length, root, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, length, root, backend="torch"), atol=2e-6, rtol=2e-6)
    # an unpadded prompt block into empty rows: causal, no mask
    P = 9
    chain = specdec.tree.prefill_mask(zeros, P)
    plan = ops.sdpa_plan(zeros, zeros, chain, P, host_start=host0, host_length=host0, causal_rows=P)
    assert plan.mask is None and plan.causal_rows == P
    q = torch.randn(B, Hq, P, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, zeros, chain, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, zeros, chain, backend="torch"), atol=2e-6, rtol=2e-6)
    # padding, ragged lengths or a tree: a mask
    assert ops.sdpa_plan(torch.tensor([0, 2, 0]), length, root, 12, host_start=np.array([0, 2, 0]),
                         host_length=length.numpy()).mask is not None
    ragged = torch.tensor([11, 10, 11])
    assert ops.sdpa_plan(zeros, ragged, root, 12, host_start=host0, host_length=ragged.numpy()).mask is not None
    tree = make_tree("star", B, 4, seed=0).ancestor_mask
    assert ops.sdpa_plan(zeros, length, tree, 15, host_start=host0, host_length=length.numpy()).mask is not None


@pytest.mark.parametrize("plan, match", [
    (ops.SdpaPlan(13, None), "plan: kv_len 13 outside"),
    (ops.SdpaPlan(8, torch.ones(2, 1, 5, 7, dtype=torch.bool)), r"plan: mask expected \[2, 1, 5, 8\] bool"),
    (ops.SdpaPlan(8, None, causal_rows=5), "plan: an all-causal plan needs kv_len == T"),
    (ops.SdpaPlan(8, None, causal_rows=6), "plan: causal_rows 6 outside 0..5"),
    (ops.SdpaPlan(5, torch.ones(2, 1, 5, 5, dtype=torch.bool), causal_rows=2), r"plan: mask expected \[2, 1, 3, 5\]"),
])
def test_bad_plans(plan, match):
    with pytest.raises(ValueError, match=match):
        ops.tree_attention(torch.randn(2, 4, 5, 8), torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8),
                           torch.zeros(2, dtype=torch.int64), torch.full((2,), 3),
                           torch.ones(2, 5, 1, dtype=torch.int32), backend="sdpa", plan=plan)


def test_backend_resolution():
    cpu = torch.device("cpu")
    assert resolve_backend("auto", cpu, fast_torch="sdpa") == "sdpa"  # tree attention off the GPU
    assert resolve_backend("auto", cpu) == "torch"  # ops with no fast torch path
    with pytest.raises(ValueError, match="backend: 'sdpa' is tree attention's fast path"):
        ops.path_mean(torch.zeros(1, 2), torch.tensor([[-1, 0]]), torch.tensor([2]), backend="sdpa")


def test_prompt_block_and_tree_plan_is_causal_then_masked():
    """An unpadded prompt block with a tree: the block runs causally with no mask, the tree rows masked."""
    B, Hq, Hkv, D, P, T = 2, 4, 2, 8, 6, 4
    gen = torch.Generator().manual_seed(0)
    zeros, host0 = torch.zeros(B, dtype=torch.int64), np.zeros(B, dtype=np.int64)
    tree = make_tree("random", B, T, seed=2)
    mask = specdec.tree.prompt_tree_mask(zeros, P, tree.ancestor_mask)
    plan = ops.sdpa_plan(zeros, zeros, mask, P + T, host_start=host0, host_length=host0, causal_rows=P)
    assert plan.causal_rows == P and plan.mask.shape == (B, 1, T, P + T)
    q = torch.randn(B, Hq, P + T, D, generator=gen)
    k, v = torch.randn(B, Hkv, P + T + 3, D, generator=gen), torch.randn(B, Hkv, P + T + 3, D, generator=gen)
    torch.testing.assert_close(ops.tree_attention(q, k, v, zeros, zeros, mask, backend="sdpa", plan=plan),
                               ops.tree_attention(q, k, v, zeros, zeros, mask, backend="torch"), atol=2e-6, rtol=2e-6)
    # a padded row, or a block that does not start at slot 0, gets the dense mask
    assert ops.sdpa_plan(zeros, zeros, mask, P + T, host_start=np.array([0, 1]), host_length=host0,
                         causal_rows=P).causal_rows == 0
    assert ops.sdpa_plan(zeros, zeros, mask, P + T + 1, host_start=host0, host_length=host0,
                         causal_rows=P).causal_rows == 0
