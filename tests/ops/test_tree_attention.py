"""The tree-attention contract (docs/kernels.md, K1) on the torch backend, checked against torch's SDPA."""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from specdec import ops
from specdec.tree import TreeBatch, pack_bits, unpack_bits


def random_tree(B: int, T: int, seed: int) -> TreeBatch:
    rng = random.Random(seed)
    nodes = [T] + [rng.randint(1, T) for _ in range(B - 1)]
    parents = [[-1] + [rng.randrange(i) for i in range(1, T)] for _ in range(B)]
    return TreeBatch.from_parents([list(range(T))] * B, parents, nodes)


def per_node_sdpa(q, k, v, start, length, bits, scale):
    """Each node separately: F.scaled_dot_product_attention over exactly the slots it may see."""
    B, Hq, T, D = q.shape
    group = Hq // k.shape[1]
    out = torch.empty_like(q)
    for b in range(B):
        for i in range(T):
            seen = list(range(int(start[b]), int(length[b]))) + [int(length[b]) + m for m in range(bits.shape[-1]) if bits[b, i, m]]
            kk = k[b, :, seen].repeat_interleave(group, 0)
            vv = v[b, :, seen].repeat_interleave(group, 0)
            out[b, :, i] = F.scaled_dot_product_attention(q[b, :, i:i + 1].double(), kk.double(), vv.double(),
                                                          scale=scale)[:, 0].to(q.dtype)
    return out


@pytest.mark.parametrize("T", [1, 2, 7, 33])
@pytest.mark.parametrize("prefix", [0, 1, 45])
@pytest.mark.parametrize("Hq, Hkv", [(2, 2), (4, 2), (4, 1)])
def test_matches_per_node_sdpa(T, prefix, Hq, Hkv):
    B, D = 3, 16
    torch.manual_seed(T * 100 + prefix)
    tree = random_tree(B, T, seed=T + prefix)
    start = torch.tensor([0, 2, 5])[:B].clamp(max=prefix)
    length = torch.full((B,), prefix)
    S = prefix + T + 3
    q = torch.randn(B, Hq, T, D)
    k, v = torch.randn(B, Hkv, S, D), torch.randn(B, Hkv, S, D)
    out = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, backend="torch")
    want = per_node_sdpa(q, k, v, start, length, unpack_bits(tree.ancestor_mask, T), D**-0.5)
    torch.testing.assert_close(out, want, atol=2e-6, rtol=2e-6)


def test_chain_equals_causal_attention_and_ignores_slots_outside():
    B, H, T, D, P = 2, 2, 9, 8, 5
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(B, H, P + T + 4, D), torch.randn(B, H, P + T + 4, D)
    chain = TreeBatch.from_parents([list(range(T))] * B, [list(range(-1, T - 1))] * B)
    out = ops.tree_attention(q, k, v, torch.zeros(B, dtype=torch.int64), torch.full((B,), P), chain.ancestor_mask)
    qf = torch.cat([torch.zeros(B, H, P, D), q], 2)  # causal over prefix + chain, keep the chain's rows
    want = F.scaled_dot_product_attention(qf, k[:, :, : P + T], v[:, :, : P + T], is_causal=True)[:, :, P:]
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    k2, v2 = k.clone(), v.clone()
    k2[:, :, P + T:] = 1e4  # free slots after the tree are never read
    v2[:, :, P + T:] = 1e4
    torch.testing.assert_close(ops.tree_attention(q, k2, v2, torch.zeros(B, dtype=torch.int64),
                                                  torch.full((B,), P), chain.ancestor_mask), out)


def test_wide_mask_addresses_earlier_tree_nodes():
    """W > ceil(T/32): the queries are the newest nodes of a tree region (the draft's layer-by-layer case)."""
    B, H, D, P = 1, 2, 8, 3
    q = torch.randn(B, H, 2, D)
    k, v = torch.randn(B, H, P + 40, D), torch.randn(B, H, P + 40, D)
    bits = torch.zeros(B, 2, 64, dtype=torch.bool)
    bits[0, 0, [0, 35]] = True  # query 0: region slot 0 (its parent) and 35 (itself)
    bits[0, 1, [1, 36]] = True
    out = ops.tree_attention(q, k, v, torch.zeros(1, dtype=torch.int64), torch.full((1,), P), pack_bits(bits))
    want = per_node_sdpa(q, k, v, [0], [P], bits, D**-0.5)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype, atol", [(torch.float16, 2e-3), (torch.bfloat16, 2e-2)])
def test_low_precision_inputs_accumulate_in_fp32(dtype, atol):
    tree = random_tree(2, 7, seed=0)
    q = torch.randn(2, 4, 7, 16)
    k, v = torch.randn(2, 2, 20, 16), torch.randn(2, 2, 20, 16)
    start, length = torch.tensor([0, 3]), torch.tensor([10, 12])
    out = ops.tree_attention(q.to(dtype), k.to(dtype), v.to(dtype), start, length, tree.ancestor_mask)
    assert out.dtype == dtype
    ref = ops.tree_attention(q.to(dtype).float(), k.to(dtype).float(), v.to(dtype).float(), start, length, tree.ancestor_mask)
    torch.testing.assert_close(out.float(), ref, atol=atol, rtol=0)


def test_out_argument_and_noncontiguous_inputs():
    tree = random_tree(2, 5, seed=1)
    q = torch.randn(2, 5, 4, 8).transpose(1, 2)  # [B, Hq, T, D] view, not contiguous
    k, v = torch.randn(2, 2, 12, 8), torch.randn(2, 2, 12, 8)
    start, length = torch.tensor([0, 1]), torch.tensor([6, 7])
    out = torch.empty(2, 4, 5, 8)
    res = ops.tree_attention(q, k, v, start, length, tree.ancestor_mask, out=out)
    assert res.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, ops.tree_attention(q.contiguous(), k, v, start, length, tree.ancestor_mask))


@pytest.mark.parametrize("change, match", [
    (dict(q=torch.randn(2, 3, 5, 8)), "q: 3 query heads are not a multiple of the 2"),
    (dict(k=torch.randn(2, 2, 12, 4), v=torch.randn(2, 2, 12, 4)), r"k: expected \[2, Hkv, S, 8\]"),
    (dict(v=torch.randn(2, 2, 11, 8)), "v: shape"),
    (dict(start=torch.zeros(3, dtype=torch.int64)), r"start: expected \[2\]"),
    (dict(length=torch.zeros(2)), r"length: expected \[2\] int32/int64"),
    (dict(tree_mask=torch.zeros(2, 5, 1, dtype=torch.int64)), r"tree_mask: expected \[2, 5, >=1\] int32"),
    (dict(backend="cuda-magic"), "backend: 'cuda-magic' is not one of"),
])
def test_bad_arguments(change, match):
    args = dict(q=torch.randn(2, 4, 5, 8), k=torch.randn(2, 2, 12, 8), v=torch.randn(2, 2, 12, 8),
                start=torch.zeros(2, dtype=torch.int64), length=torch.full((2,), 4),
                tree_mask=torch.ones(2, 5, 1, dtype=torch.int32), backend="torch")
    args.update(change)
    backend = args.pop("backend")
    with pytest.raises(ValueError, match=match):
        ops.tree_attention(*args.values(), backend=backend)
