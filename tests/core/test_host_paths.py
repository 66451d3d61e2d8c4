"""The numpy paths that trees on the CPU take (tree metadata, greedy/predicted acceptance, the sdpa mask)
against the torch code they stand in for, on ragged batches of random trees, multi-word masks included."""

from __future__ import annotations

import importlib
import random

import pytest
import torch

from specdec import ops
from specdec.sampling import _accept_predicted_host, _accept_predicted_torch, accept_predicted
from specdec.tree import TreeBatch

attention = importlib.import_module("specdec.ops.tree_attention")

SHAPES = [(1, 1), (1, 2), (3, 8), (2, 31), (2, 32), (5, 33), (4, 64), (2, 100)]


def ragged_tree(B: int, T: int, seed: int) -> TreeBatch:
    """Random trees (row 0 full, the others ragged) with distinct tokens per row, so siblings differ; the
    padding holds garbage parents (-7, 10**6, a forward pointer) that every path must ignore. Odd seeds
    make deep trees (a node's parent is the node before it 9 times in 10; row 0 of seed 1: one chain)."""
    rng = random.Random(seed)
    deep = seed % 2 == 1

    def parent(b: int, i: int) -> int:
        on_chain = deep and ((b == 0 and seed == 1) or rng.random() < 0.9)
        return i - 1 if on_chain else rng.randrange(i)

    parents = torch.tensor([[-1] + [parent(b, i) for i in range(1, T)] for b in range(B)])
    num_nodes = torch.tensor([T] + [rng.randint(1, T) for _ in range(B - 1)])
    for b in range(1, B):
        pad = torch.arange(T) >= num_nodes[b]
        parents[b] = torch.where(pad, torch.tensor([-7, 10**6, T - 1])[torch.arange(T) % 3], parents[b])
    tokens = torch.stack([torch.randperm(T, generator=torch.Generator().manual_seed(seed + b)) + 5 for b in range(B)])
    return TreeBatch(tokens, parents, num_nodes)


def following(tree: TreeBatch, seed: int, agree: float) -> torch.Tensor:
    """Predictions [B, T] that name one of a node's children with probability `agree` (deep accepted
    paths), else a token no node holds."""
    rng = random.Random(seed)
    B, T = tree.tokens.shape
    pred = torch.full((B, T), 1, dtype=torch.int64)
    for b in range(B):
        n = int(tree.num_nodes[b])
        for i in range(T):
            children = [j for j in range(1, n) if int(tree.parents[b, j]) == i]
            if children and rng.random() < agree:
                pred[b, i] = tree.tokens[b, rng.choice(children)]
    return pred


@pytest.mark.parametrize("B,T", SHAPES)
def test_metadata_matches_the_reference(B, T):
    for seed in range(4):
        tree = ragged_tree(B, T, seed)
        depth, mask = ops.tree_metadata_host(tree.parents, tree.num_nodes)
        ref_depth, ref_mask = ops.tree_metadata_ref(tree.parents, tree.num_nodes)
        if seed == 1:
            assert int(ref_depth[0].max()) == T - 1  # the chain: every pointer-jumping round counts
        assert depth.dtype == torch.int64 and mask.dtype == torch.int32 and mask.shape == ref_mask.shape
        assert torch.equal(depth, ref_depth) and torch.equal(mask, ref_mask)
        # a CPU tree's derivations come from it
        assert torch.equal(tree.depth, ref_depth) and torch.equal(tree.ancestor_mask, ref_mask)


def test_metadata_of_a_worked_example_and_bad_devices():
    depth, mask = ops.tree_metadata_host(torch.tensor([[-1, 0, 0, 1]]), torch.tensor([4]))
    assert depth.tolist() == [[0, 1, 1, 2]] and mask[..., 0].tolist() == [[0b0001, 0b0011, 0b0101, 0b1011]]
    if torch.cuda.is_available():
        with pytest.raises(ValueError, match="parents"):
            ops.tree_metadata_host(torch.zeros(1, 2, dtype=torch.int64, device="cuda"),
                                   torch.ones(1, dtype=torch.int64))


@pytest.mark.parametrize("B,T", [s for s in SHAPES if s[1] > 1])
@pytest.mark.parametrize("agree", [0.0, 0.7, 1.0])
def test_acceptance_matches_the_torch_rule(B, T, agree):
    deepest = 0
    for seed in range(4):
        tree = ragged_tree(B, T, seed)
        pred = following(tree, seed, agree)
        host = _accept_predicted_host(tree, pred)
        ref = _accept_predicted_torch(TreeBatch(tree.tokens, tree.parents, tree.num_nodes), pred)
        for got, want in zip(host, ref):
            assert got.dtype == want.dtype and torch.equal(got, want)
        assert all(torch.equal(a, b) for a, b in zip(accept_predicted(tree, pred), ref))  # the CPU dispatch
        deepest = max(deepest, int(host[1].max()))
    assert deepest >= (2 if agree == 1.0 and T >= 8 else 0)  # the grid reaches deep paths, not only the root


@pytest.mark.parametrize("B,T", SHAPES)
def test_sdpa_mask_matches_the_torch_mask(B, T):
    gen = torch.Generator().manual_seed(T)
    for seed in range(3):
        tree = ragged_tree(B, T, seed)
        length = torch.randint(0, 40, (B,), generator=gen)
        start = (torch.rand(B, generator=gen) * (length + 1)).long()
        for slots in (int(length.max()) + T, int(length.max()) + T + 9):
            for words in (tree.ancestor_mask, tree.ancestor_mask[:, T // 2:]):  # a sliced mask (prompt + tree)
                got = attention._tree_attention_mask_host(start, length, words, slots)
                want = attention.tree_attention_mask(start, length, words, slots)
                assert got.dtype == torch.bool and torch.equal(got, want)
