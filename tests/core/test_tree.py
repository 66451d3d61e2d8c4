"""TreeBatch derivations: hand-worked trees and random trees against plain-Python walks."""

from __future__ import annotations

import random

import pytest
import torch

import specdec
from specdec import ops
from specdec.tree import TreeBatch, pack_bits, prefill_mask, unpack_bits


def python_walk(parents: list[int], n: int):
    """Plain-Python depth, ancestor sets, leaves and root-to-leaf paths of one row's first n nodes."""
    depth, anc = [], []
    for i in range(n):
        p = parents[i]
        depth.append(0 if p < 0 else depth[p] + 1)
        anc.append({i} if p < 0 else anc[p] | {i})
    children = {p for p in parents[1:n]}
    leaves = [i for i in range(n) if i not in children]
    paths = [sorted(anc[leaf]) for leaf in leaves]
    return depth, anc, leaves, paths


def check_against_walk(tree: TreeBatch):
    T = tree.size
    bits = unpack_bits(tree.ancestor_mask, T)
    paths = tree.paths
    for b in range(tree.batch_size):
        n = int(tree.num_nodes[b])
        depth, anc, leaves, walk_paths = python_walk(tree.parents[b].tolist(), n)
        assert tree.depth[b, :n].tolist() == depth
        for i in range(n):
            assert {m for m in range(T) if bits[b, i, m]} == anc[i]
        for i in range(n, T):  # padding: itself only, never a leaf
            assert {m for m in range(T) if bits[b, i, m]} == {i}
        assert [i for i in range(T) if tree.leaves[b, i]] == leaves
        got = [[x for x in row if x >= 0] for row in paths[b].tolist()]
        assert got[: len(leaves)] == walk_paths and all(not r for r in got[len(leaves):])


def test_worked_example_from_docstring():
    tree = TreeBatch.from_parents([[7, 3, 5, 9]], [[-1, 0, 0, 1]])
    assert tree.depth.tolist() == [[0, 1, 1, 2]]
    assert tree.ancestor_mask[0, :, 0].tolist() == [0b0001, 0b0011, 0b0101, 0b1011]
    assert tree.leaves.tolist() == [[False, False, True, True]]
    assert tree.paths.tolist() == [[[0, 2, -1], [0, 1, 3]]]


@pytest.mark.parametrize("name, parents", [
    ("single_root", [-1]),
    ("chain", [-1, 0, 1, 2, 3, 4]),
    ("star", [-1, 0, 0, 0, 0, 0, 0]),
    ("unbalanced", [-1, 0, 1, 2, 0, 4, 1, 6, 7, 8]),
])
def test_hand_worked_shapes(name, parents):
    tree = TreeBatch.from_parents([list(range(len(parents)))], [parents])
    check_against_walk(tree)


@pytest.mark.parametrize("T", [1, 2, 7, 31, 32, 33, 70])
def test_random_ragged_trees(T):
    rng = random.Random(T)
    B = 4
    parents, tokens, nodes = [], [], []
    for _ in range(B):
        n = rng.randint(1, T)
        par = [-1] + [rng.randrange(i) for i in range(1, n)] + [rng.randrange(-5, 99) for _ in range(T - n)]
        parents.append(par)
        tokens.append(list(range(T)))  # distinct tokens: siblings always distinct
        nodes.append(n)
    tree = TreeBatch.from_parents(tokens, parents, nodes)
    check_against_walk(tree)


def test_path_min_is_the_least_value_on_each_root_path():
    """The docstring's chain, and a ragged batch (a branching row, a shorter row with padding) against a walk
    up the parents."""
    chain = TreeBatch.from_parents([[7, 8, 9]], [[-1, 0, 1]], [3])
    assert chain.path_min(torch.tensor([[float("inf"), 0.5, 0.9]])).tolist() == [[float("inf"), 0.5, 0.5]]
    tree = TreeBatch.from_parents([[7, 8, 9, 10, 11], [7, 8, 9, 0, 0]], [[-1, 0, 0, 1, 3], [-1, 0, 1, -1, -1]], [5, 3])
    values = torch.tensor([[3.0, 1.0, 2.0, 4.0, 0.5], [2.0, 5.0, 1.5, 9.0, 8.0]])
    got = tree.path_min(values).tolist()
    for b, n in enumerate(tree.num_nodes.tolist()):
        for i in range(n):
            want, j = values[b, i].item(), tree.parents[b, i].item()
            while j >= 0:
                want, j = min(want, values[b, j].item()), tree.parents[b, j].item()
            assert got[b][i] == want, (b, i)


def test_pack_unpack_roundtrip_all_bit_positions():
    bits = torch.rand(3, 5, 70) < 0.5
    bits[0, 0, 31] = bits[0, 0, 63] = True  # the sign bits of int32 words
    words = pack_bits(bits)
    assert words.dtype == torch.int32 and words.shape == (3, 5, 3)
    assert torch.equal(unpack_bits(words, 70), bits)


def test_from_paths_merges_shared_prefixes_breadth_first():
    tree = TreeBatch.from_paths([5, 6], [[[1, 2, 3], [1, 4], [7]], [[]]])
    assert tree.num_nodes.tolist() == [6, 1]
    assert tree.tokens[0].tolist() == [5, 1, 7, 2, 4, 3]
    assert tree.parents[0].tolist() == [-1, 0, 0, 1, 1, 3]
    assert tree.tokens[1, 0].item() == 6 and tree.max_depth == 3
    check_against_walk(tree)


def test_from_ancestor_mask_recovers_parents_medusa_style():
    parents = [-1, 0, 0, 1, 1, 2, 3]
    ref = TreeBatch.from_parents([list(range(10, 17))], [parents])
    dense = unpack_bits(ref.ancestor_mask, 7).float()  # [1, T, T] float ones, as Medusa keeps it
    for mask in (dense, dense[0], dense[:, None]):
        tree = TreeBatch.from_ancestor_mask(ref.tokens, mask)
        assert tree.parents.tolist() == [parents]


def test_from_ancestor_mask_rejects_inconsistent_mask():
    orphan = torch.eye(3)
    orphan[2, 0] = orphan[2, 1] = 1  # node 1 lists no ancestor at all
    with pytest.raises(ValueError, match="tree_mask: row 0 node 1 lists no ancestor"):
        TreeBatch.from_ancestor_mask(torch.tensor([[4, 5, 6]]), orphan)
    skipped = torch.eye(3)
    skipped[1, 0] = skipped[2, 1] = 1  # node 2 hangs under node 1 but skips the root
    with pytest.raises(ValueError, match="tree_mask: row 0 node 2 does not list exactly itself and its ancestors"):
        TreeBatch.from_ancestor_mask(torch.tensor([[4, 5, 6]]), skipped)


def test_prefill_mask_is_causal_from_start_and_pads_see_themselves():
    start = torch.tensor([0, 3, 40])
    T = 45
    bits = unpack_bits(prefill_mask(start, T), T)
    for b, s in enumerate(start.tolist()):
        for i in range(T):
            want = {i} if i < s else set(range(s, i + 1))
            assert {m for m in range(T) if bits[b, i, m]} == want


@pytest.mark.parametrize("kwargs, match", [
    (dict(tokens=[[1, 2, 3]], parents=[[-1, 2, 0]]), r"parents: row 0 node 1 has parent 2"),
    (dict(tokens=[[1, 2, 3]], parents=[[-1, 0, 2]]), r"parents: row 0 node 2 has parent 2"),  # self-cycle
    (dict(tokens=[[1, 2, 3]], parents=[[0, 0, 1]]), r"parents: row 0 node 0 \(the root\)"),
    (dict(tokens=[[1, 2, 2]], parents=[[-1, 0, 0]]), r"tokens: row 0 nodes 1 and 2 are siblings"),
    (dict(tokens=[[1, 2, 3]], parents=[[-1, 0, 1]], num_nodes=[4]), r"num_nodes: row 0 has 4 nodes"),
    (dict(tokens=[[1, 2, 3]], parents=[[-1, 0, 1]], num_nodes=[0]), r"num_nodes: row 0 has 0 nodes"),
    (dict(tokens=[[1, 2, 300]], parents=[[-1, 0, 1]], vocab_size=100), r"tokens: row 0 node 2 holds id 300"),
    (dict(tokens=[[1, -4, 3]], parents=[[-1, 0, 1]], vocab_size=100), r"tokens: row 0 node 1 holds id -4"),
    (dict(tokens=[[1, 2]], parents=[[-1, 0, 1]]), r"parents: shape"),
    (dict(tokens=[[1, 2]], parents=[[-1, 0]], num_nodes=[2, 2]), r"num_nodes: expected \[1\]"),
])
def test_invalid_trees_raise_value_error_naming_the_argument(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TreeBatch.from_parents(**kwargs)


def test_padding_nodes_are_not_validated():
    tree = TreeBatch.from_parents([[1, 2, 2, 2]], [[-1, 0, 9, -7]], [2], vocab_size=3)
    assert tree.depth.tolist() == [[0, 1, 0, 0]]


@pytest.mark.parametrize("T", [1, 6, 33, 70])
def test_chain_constructor_matches_general_derivations(T):
    tokens = torch.randint(0, 50, (3, T))
    num_nodes = torch.tensor([T, max(1, T // 2), 1])
    chain = TreeBatch.chain(tokens, num_nodes)
    general = TreeBatch(tokens, (torch.arange(T) - 1).expand(3, T).contiguous(), num_nodes)
    ref_depth, ref_mask = ops.tree_metadata_ref(general.parents, general.num_nodes)
    assert torch.equal(chain.depth, ref_depth)
    assert torch.equal(chain.ancestor_mask, ref_mask)
    assert torch.equal(chain.paths, general.paths) and chain.max_depth == T - 1
    chain.validate()


def test_root_only_tree_metadata():
    tree = TreeBatch(torch.tensor([[5], [7]]), torch.full((2, 1), -1), torch.ones(2, dtype=torch.int64))
    assert torch.equal(tree.depth, torch.zeros(2, 1, dtype=torch.int64))
    assert torch.equal(tree.ancestor_mask, pack_bits(torch.ones(2, 1, 1, dtype=torch.bool)))


def test_prompt_tree_mask_worked_example():
    root_child = TreeBatch.from_parents([[5, 6]], [[-1, 0]]).ancestor_mask
    mask = specdec.tree.prompt_tree_mask(torch.tensor([1]), 2, root_child)
    assert mask[0, :, 0].tolist() == [0b0001, 0b0010, 0b0110, 0b1110]
