"""Tree metadata from parent pointers: depth and ancestor bitmask in one launch (launcher and dispatch).

The pure-torch reference is `tree_metadata_ref` (pointer jumping); the Triton kernel is
``kernels/tree_metadata.py``, which `TreeBatch` uses for trees on CUDA; `tree_metadata_host` runs the
reference's steps in numpy, which `TreeBatch` uses for trees on the CPU (where a tensor is host memory
already, and a numpy call on a few dozen elements costs a fraction of a torch op's dispatch).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ._backend import kernel_module, resolve_backend
from .bits import pack_bits

__all__ = ["tree_metadata", "tree_metadata_ref", "tree_metadata_host", "detached_parents", "detached_parents_host",
           "depth_ref", "ancestor_mask_ref", "MAX_KERNEL_NODES"]

# The kernel keeps a row's [T, ceil(T/32)] mask words in registers; beyond this many nodes (128 KiB of
# words per program) it would spill, and trees that large are prompts, which use `prefill_mask` instead.
MAX_KERNEL_NODES = 1024


def tree_metadata(parents: Tensor, num_nodes: Tensor, *, backend: str = "auto") -> tuple[Tensor, Tensor]:
    """Depth and ancestor bitmask of one tree per batch row.

    parents:   [B, T] int64, -1 for the root, ``parents[b, i] < i`` (topological order); entries of
               padding nodes, and any out of range, are ignored.
    num_nodes: [B] int64, real nodes per row; nodes ``i >= num_nodes[b]`` are padding.

    Returns (depth [B, T] int64, ancestor_mask [B, T, W] int32 with W = ceil(T/32)), exactly
    `TreeBatch.depth` and `TreeBatch.ancestor_mask`: bit m (word m // 32, little-endian) of node i is set
    iff m is i or an ancestor of i; the root and padding nodes have depth 0, padding nodes only their own
    bit. Example: parents [-1, 0, 0, 1] -> depth [0, 1, 1, 2], masks [0b0001, 0b0011, 0b0101, 0b1011].
    Data is not checked (a parent >= its node is treated as no parent); `TreeBatch.validate` does that.
    """
    if parents.ndim != 2 or parents.shape[1] < 1 or parents.dtype != torch.int64:
        raise ValueError(f"parents: expected [B, T] int64 with T >= 1, got {tuple(parents.shape)} {parents.dtype}")
    B, T = parents.shape
    if num_nodes.shape != (B,) or num_nodes.dtype != torch.int64:
        raise ValueError(f"num_nodes: expected [{B}] int64, got {tuple(num_nodes.shape)} {num_nodes.dtype}")
    if num_nodes.device != parents.device:
        raise ValueError(f"num_nodes: on {num_nodes.device}, parents on {parents.device}")
    if resolve_backend(backend, parents.device, cuda_unsupported="has no kernel for tree_metadata: use 'triton' or "
                       "'torch'") == "torch" or (backend == "auto" and T > MAX_KERNEL_NODES):
        return tree_metadata_ref(parents, num_nodes)
    if T > MAX_KERNEL_NODES:
        raise ValueError(f"parents: the Triton kernel handles up to {MAX_KERNEL_NODES} nodes per row, got {T}")
    W = math.ceil(T / 32)
    depth = torch.empty(B, T, dtype=torch.int64, device=parents.device)
    mask = torch.empty(B, T, W, dtype=torch.int32, device=parents.device)
    block_t = 1 << (T - 1).bit_length()
    block_w = 1 << (W - 1).bit_length()
    # One warp keeps the per-node reductions inside a warp (no barriers) for trees up to 64 nodes; more
    # nodes x mask words get more warps (128 nodes: 2).
    num_warps = max(1, min(8, block_t * block_w // 256))
    kernel_module("tree_metadata")._tree_metadata_kernel[(B,)](
        parents, num_nodes.contiguous(), depth, mask, T, W, *parents.stride(), *depth.stride(), *mask.stride(),
        BLOCK_T=block_t, BLOCK_W=block_w, num_warps=num_warps)
    return depth, mask


def tree_metadata_ref(parents: Tensor, num_nodes: Tensor) -> tuple[Tensor, Tensor]:
    """`tree_metadata` in torch (the reference): ``(depth_ref(p), ancestor_mask_ref(p))`` of the parents
    with padding detached, ``p = detached_parents(parents, num_nodes)``. Same arguments and results."""
    p = detached_parents(parents, num_nodes)
    return depth_ref(p), ancestor_mask_ref(p)


def tree_metadata_host(parents: Tensor, num_nodes: Tensor) -> tuple[Tensor, Tensor]:
    """`tree_metadata_ref` for CPU tensors, in numpy: the same pointer jumping, on the packed mask words
    (a word OR is the union of two nodes' bit sets). Same arguments and results (CPU tensors that own
    their memory). An 8-node tree at batch 1 on the 2-core CPU: about 40 us here against about 230 us for
    the reference's two dozen torch calls."""
    if parents.device.type != "cpu" or num_nodes.device.type != "cpu":
        raise ValueError(f"parents: tree_metadata_host needs CPU tensors, got {parents.device}")
    p = detached_parents_host(parents, num_nodes)
    B, T = p.shape
    idx = np.arange(T)
    words = np.zeros((B, T, max(1, math.ceil(T / 32))), dtype=np.uint32)
    words[:, idx, idx // 32] = np.left_shift(np.uint32(1), (idx % 32).astype(np.uint32))
    depth = (p >= 0).astype(np.int64)
    rows = np.arange(B)[:, None]
    jump = p
    for _ in range(max(1, math.ceil(math.log2(T + 1)))):  # node i takes in its 2^k-th ancestor's bits and depth
        has = jump >= 0
        if not has.any():
            break
        safe = np.maximum(jump, 0)
        words |= np.where(has[:, :, None], words[rows, safe], 0).astype(np.uint32)
        depth += np.where(has, depth[rows, safe], 0)
        jump = np.where(has, jump[rows, safe], -1)
    return torch.from_numpy(depth), torch.from_numpy(words.view(np.int32))


def detached_parents_host(parents: Tensor, num_nodes: Tensor) -> np.ndarray:
    """`detached_parents` of CPU tensors, as a numpy array [B, T] int64."""
    p, idx = parents.numpy(), np.arange(parents.shape[1])
    return np.where((idx[None, :] < num_nodes.numpy()[:, None]) & (p < idx), p, -1)


def detached_parents(parents: Tensor, num_nodes: Tensor) -> Tensor:
    """[B, T] int64: `parents` with padding nodes, and any parent out of range (>= its node), set to -1."""
    T = parents.shape[1]
    idx = torch.arange(T, device=parents.device)
    p = torch.where(idx[None, :] < num_nodes[:, None], parents, -1)
    return torch.where(p < idx, p, -1)


def depth_ref(parents: Tensor) -> Tensor:
    """[B, T] int64 depth by pointer jumping, from detached parents (`detached_parents`: -1 for roots and
    padding). Example: [-1, 0, 0, 1] -> [0, 1, 1, 2]."""
    depth = (parents >= 0).to(torch.int64)
    jump = parents
    for _ in range(max(1, math.ceil(math.log2(parents.shape[1] + 1)))):
        has = jump >= 0
        safe = jump.clamp(min=0)
        depth = depth + torch.where(has, depth.gather(1, safe), 0)
        jump = torch.where(has, jump.gather(1, safe), -1)
    return depth


def ancestor_mask_ref(parents: Tensor) -> Tensor:
    """[B, T, W] int32 ancestor bitmask (`bits` layout) by pointer jumping, from detached parents
    (`detached_parents`). Example: [-1, 0, 0, 1] -> [0b0001, 0b0011, 0b0101, 0b1011]."""
    B, T = parents.shape
    idx = torch.arange(T, device=parents.device)
    bits = torch.zeros(B, T, T, dtype=torch.bool, device=parents.device)
    bits[:, idx, idx] = True
    has = parents >= 0
    parent_bit = torch.zeros_like(bits)
    parent_bit.scatter_(2, parents.clamp(min=0)[:, :, None], has[:, :, None])
    bits |= parent_bit
    jump = parents
    for _ in range(max(1, math.ceil(math.log2(T + 1)))):  # bits[i] |= bits[2^k-th ancestor]
        has = jump >= 0
        safe = jump.clamp(min=0)
        bits = bits | (torch.gather(bits, 1, safe[:, :, None].expand(B, T, T)) & has[:, :, None])
        jump = torch.where(has, jump.gather(1, safe), -1)
    return pack_bits(bits)
