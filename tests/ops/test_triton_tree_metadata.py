"""The Triton tree-metadata kernel against its pure-torch reference `ops.tree_metadata_ref`.

Without a GPU it runs under Triton's interpreter (tests/conftest.py sets TRITON_INTERPRET=1).
"""

from __future__ import annotations

import random

import pytest
import torch

from specdec import ops
from specdec.tree import TreeBatch

pytest.importorskip("triton")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def ragged_parents(B: int, T: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Random trees; rows after the first are ragged, with garbage (-7, 10**6, a self-loop) in padding."""
    rng = random.Random(seed)
    parents = torch.tensor([[-1] + [rng.randrange(i) for i in range(1, T)] for _ in range(B)])
    num_nodes = torch.tensor([T] + [rng.randint(1, T) for _ in range(B - 1)])
    for b in range(1, B):
        pad = torch.arange(T) >= num_nodes[b]
        parents[b] = torch.where(pad, torch.tensor([-7, 10**6, T - 1])[torch.arange(T) % 3], parents[b])
    return parents.to(DEVICE), num_nodes.to(DEVICE)


@pytest.mark.parametrize("T", [1, 7, 33, 70])
def test_matches_the_reference(T):
    parents, num_nodes = ragged_parents(4, T, seed=T)
    depth, mask = ops.tree_metadata(parents, num_nodes, backend="triton")
    ref_depth, ref_mask = ops.tree_metadata_ref(parents, num_nodes)
    assert depth.dtype == torch.int64 and mask.dtype == torch.int32
    assert mask.shape == (4, T, (T + 31) // 32)
    assert torch.equal(depth, ref_depth)
    assert torch.equal(mask, ref_mask)
    assert all(torch.equal(a, b) for a, b in zip((depth, mask), ops.tree_metadata(parents, num_nodes, backend="torch")))


def test_reference_is_treebatch_derivations():
    """On the CPU, `TreeBatch.depth` / `.ancestor_mask` are the reference's results."""
    parents, num_nodes = ragged_parents(4, 33, seed=2)
    tree = TreeBatch(parents.cpu(), parents.cpu(), num_nodes.cpu())
    ref_depth, ref_mask = ops.tree_metadata_ref(parents.cpu(), num_nodes.cpu())
    assert torch.equal(tree.depth, ref_depth) and torch.equal(tree.ancestor_mask, ref_mask)


@pytest.mark.parametrize("name, parents", [("chain", list(range(-1, 69))), ("star", [-1] + [0] * 69)])
def test_chain_and_star_use_every_bit_of_a_word(name, parents):
    """A 70-chain sets bit 31 (the int32 sign bit) and crosses into a third word; a star stays shallow."""
    p = torch.tensor([parents], device=DEVICE)
    n = torch.tensor([70], device=DEVICE)
    depth, mask = ops.tree_metadata(p, n, backend="triton")
    ref_depth, ref_mask = ops.tree_metadata_ref(p, n)
    assert torch.equal(depth, ref_depth) and torch.equal(mask, ref_mask)
    assert int(depth.max()) == (69 if name == "chain" else 1)


@pytest.mark.parametrize("op", ["triton", "ref"])
def test_worked_example_from_docstring(op):
    args = torch.tensor([[-1, 0, 0, 1]], device=DEVICE), torch.tensor([4], device=DEVICE)
    depth, mask = ops.tree_metadata(*args, backend="triton") if op == "triton" else ops.tree_metadata_ref(*args)
    assert depth.tolist() == [[0, 1, 1, 2]]
    assert mask[0, :, 0].tolist() == [0b0001, 0b0011, 0b0101, 0b1011]


def test_noncontiguous_parents():
    parents, num_nodes = ragged_parents(3, 33, seed=1)
    strided = parents.t().contiguous().t()
    assert not strided.is_contiguous()
    nodes_col = torch.stack([num_nodes, torch.ones_like(num_nodes)], 1)[:, 0]  # a strided [B] view
    for got, want in zip(ops.tree_metadata(strided, nodes_col, backend="triton"),
                         ops.tree_metadata(parents, num_nodes, backend="torch")):
        assert torch.equal(got, want)


@pytest.mark.parametrize("change, match", [
    (dict(parents=torch.zeros(2, 5, dtype=torch.int32)), r"parents: expected \[B, T\] int64"),
    (dict(parents=torch.zeros(2, 0, dtype=torch.int64)), r"parents: expected \[B, T\] int64 with T >= 1"),
    (dict(num_nodes=torch.ones(3, dtype=torch.int64)), r"num_nodes: expected \[2\] int64"),
    (dict(backend="magic"), "backend: 'magic' is not one of"),
])
def test_bad_arguments(change, match):
    args = dict(parents=torch.full((2, 5), -1, dtype=torch.int64), num_nodes=torch.ones(2, dtype=torch.int64),
                backend="torch")
    args.update(change)
    with pytest.raises(ValueError, match=match):
        ops.tree_metadata(args["parents"], args["num_nodes"], backend=args["backend"])


def test_triton_backend_unavailable_raises(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match="backend: 'triton' cannot run on cpu"):
        ops.tree_metadata(torch.tensor([[-1, 0]]), torch.tensor([2]), backend="triton")


@pytest.mark.gpu
def test_gpu_treebatch_uses_the_kernel_and_agrees():
    """On CUDA, TreeBatch.depth / .ancestor_mask come from the kernel; they equal the reference."""
    parents, num_nodes = ragged_parents(8, 200, seed=3)
    tree = TreeBatch(parents, parents, num_nodes)
    assert tree._kernel_metadata is not None
    ref_depth, ref_mask = ops.tree_metadata_ref(parents, num_nodes)
    assert torch.equal(tree.depth, ref_depth)
    assert torch.equal(tree.ancestor_mask, ref_mask)
