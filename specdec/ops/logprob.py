"""K3, batched log-prob scoring for ValuSpec: launchers and pure-torch references (docs/kernels.md, K3).

A branch's score is the mean log-prob of its tokens under a small scorer LM: `token_logprob` gives each
tree node's log-prob from the scorer's final hidden state at the node's parent (never writing the
[N, V] logits), `path_mean` averages them along root-to-node paths; a branch's score is the value at its
leaf. The Triton kernels live in ``kernels/logprob.py``, the CUDA ones in ``csrc/logprob.cuh``
(``torch.ops.specdec.*``).
"""

from __future__ import annotations

import math
from functools import cache

import torch
import torch.nn.functional as F
from torch import Tensor

from . import _cuda
from ._backend import kernel_module, resolve_backend

__all__ = ["token_logprob", "token_logprob_ref", "token_logprob_from_logits", "token_logprob_from_logits_ref",
           "path_mean", "path_mean_ref"]

_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_INTS = (torch.int32, torch.int64)
_CUDA_MAX_PATH_NODES = 4096  # path_mean's CUDA kernel keeps a row in shared memory (csrc/logprob.cuh: 96 KiB)


def token_logprob(
    hidden: Tensor,
    weight: Tensor,
    targets: Tensor,
    *,
    bias: Tensor | None = None,
    validate: bool = False,
    backend: str = "auto",
) -> Tensor:
    """``log_softmax(hidden @ weight.T + bias)[n, targets[n]]`` without materialising the [N, V] logits.

    hidden:  [N, d] fp16/bf16/fp32, the scorer's final hidden state at each node's parent; any strides.
    weight:  [V, d] same dtype, the scorer's LM head; any strides.
    targets: [N] int32/int64 token ids in [0, V) (checked only with ``validate=True``: one host sync).
    bias:    [V] same dtype, or None.
    Returns [N] float32. Products accumulate in fp32 (fp32 inputs: full fp32, no tf32) and the logits
    stay fp32, so low-precision inputs lose less than torch's own ``hidden @ weight.T`` in that dtype.

    Example: d = 1, V = 2, hidden [[1.0]], weight [[0.0], [1.0]], targets [1]: logits [0, 1], the result is
    1 - log(1 + e) = -0.3133.
    """
    if hidden.ndim != 2 or weight.ndim != 2 or weight.shape[1] != hidden.shape[1] or weight.shape[0] < 1:
        raise ValueError(f"hidden, weight: expected [N, d] and [V >= 1, d], got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    if hidden.dtype not in _FLOATS or weight.dtype != hidden.dtype:
        raise TypeError(f"hidden, weight: expected one dtype among fp16/bf16/fp32, got {hidden.dtype}, {weight.dtype}")
    (N, D), V = hidden.shape, weight.shape[0]
    if bias is not None:
        if bias.shape != (V,):
            raise ValueError(f"bias: expected [{V}], got {tuple(bias.shape)}")
        if bias.dtype != weight.dtype:
            raise TypeError(f"bias: expected {weight.dtype} like weight, got {bias.dtype}")
    _check_targets(targets, N, V, hidden.device, validate)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.device != hidden.device:
            raise ValueError(f"{name}: on {t.device}, hidden on {hidden.device}")
    resolved = resolve_backend(backend, hidden.device)
    if resolved == "torch":
        return token_logprob_ref(hidden, weight, targets, bias=bias)
    if resolved == "cuda":  # 64 x 64 logit tiles (csrc/logprob.cuh), vocabulary splits to fill the device
        splits, _ = _splits(hidden.device, max(1, math.ceil(N / 64)), math.ceil(V / 64))
        return _cuda.ops().token_logprob(hidden, weight, targets, bias, splits)
    out = torch.empty(N, dtype=torch.float32, device=hidden.device)
    if N == 0:
        return out
    block_n, block_v, block_d, warps, stages = _matmul_tiles(hidden.device, N, hidden.dtype)
    splits, per_split = _splits(hidden.device, math.ceil(N / block_n), math.ceil(V / block_v))
    parts = torch.empty(3, splits, N, dtype=torch.float32, device=hidden.device)
    kernel_module("logprob")._token_logprob_kernel[(math.ceil(N / block_n), splits)](
        hidden, weight, weight if bias is None else bias.contiguous(), targets.contiguous(),  # read at unit stride
        parts[0], parts[1], parts[2], N, V, D, *hidden.stride(), *weight.stride(), per_split,
        HAS_BIAS=bias is not None, BLOCK_N=block_n, BLOCK_V=block_v, BLOCK_D=block_d,
        DOT_PRECISION="ieee" if hidden.dtype == torch.float32 else "tf32", num_warps=warps, num_stages=stages)
    return _merge(parts, out)


def token_logprob_from_logits(logits: Tensor, targets: Tensor, *, validate: bool = False,
                              backend: str = "auto") -> Tensor:
    """``log_softmax(logits)[n, targets[n]]`` as float32 [N], for callers that already hold the logits.

    logits:  [N, V] fp16/bf16/fp32, any strides. targets: [N] int32/int64 in [0, V) (``validate=True``
    checks it). One streaming pass over each row with a running log-sum-exp; no [N, V] temporary.
    Example: logits [[0.0, 1.0]], targets [1] -> [-0.3133].
    """
    if logits.ndim != 2 or logits.shape[1] < 1:
        raise ValueError(f"logits: expected [N, V >= 1], got {tuple(logits.shape)}")
    if logits.dtype not in _FLOATS:
        raise TypeError(f"logits: expected fp16/bf16/fp32, got {logits.dtype}")
    N, V = logits.shape
    _check_targets(targets, N, V, logits.device, validate)
    resolved = resolve_backend(backend, logits.device)
    if resolved == "torch":
        return token_logprob_from_logits_ref(logits, targets)
    if resolved == "cuda":
        return _cuda.ops().token_logprob_from_logits(logits, targets)
    out = torch.empty(N, dtype=torch.float32, device=logits.device)
    if N == 0:
        return out
    block_v = 2048 if logits.device.type == "cuda" else 64
    splits, per_split = _splits(logits.device, N, math.ceil(V / block_v))
    parts = torch.empty(3, splits, N, dtype=torch.float32, device=logits.device)
    kernel_module("logprob")._logits_logprob_kernel[(N, splits)](
        logits, targets.contiguous(), parts[0], parts[1], parts[2], N, V, *logits.stride(), per_split, BLOCK_V=block_v,
        num_warps=8 if logits.device.type == "cuda" else 1)
    return _merge(parts, out)


def path_mean(logp: Tensor, parents: Tensor, num_nodes: Tensor, *, validate: bool = False,
              backend: str = "auto") -> Tensor:
    """Mean log-prob along each root-to-node path, the root excluded.

    logp:      [B, T] float32, node i's log-prob given its path (the root's value is ignored).
    parents:   [B, T] int32/int64, -1 for the root, ``parents[b, i] < i`` for real nodes (TreeBatch layout).
    num_nodes: [B] int32/int64, real nodes per row; nodes at i >= num_nodes[b] are padding.
    validate:  check num_nodes in [1, T] and the parents' topological order (one host sync).
    Returns [B, T] float32: a depth-d node averages the d non-root logp on its path; the root and padding
    nodes are 0. A branch's score is the value at its leaf.

    Example: root 0 with children 1 and 2, grandchild 3 under 1, logp [0, -1, -2, -3]:
    result [0, -1, -2, -2] (node 3: (-1 + -3) / 2).
    """
    if logp.ndim != 2 or logp.shape[1] < 1:
        raise ValueError(f"logp: expected [B, T >= 1], got {tuple(logp.shape)}")
    if logp.dtype != torch.float32:
        raise TypeError(f"logp: expected float32, got {logp.dtype}")
    B, T = logp.shape
    if parents.shape != (B, T):
        raise ValueError(f"parents: expected [{B}, {T}] like logp, got {tuple(parents.shape)}")
    if num_nodes.shape != (B,):
        raise ValueError(f"num_nodes: expected [{B}], got {tuple(num_nodes.shape)}")
    for name, t in (("parents", parents), ("num_nodes", num_nodes)):
        if t.dtype not in _INTS:
            raise TypeError(f"{name}: expected int32/int64, got {t.dtype}")
        if t.device != logp.device:
            raise ValueError(f"{name}: on {t.device}, logp on {logp.device}")
    if validate:
        _validate_tree(parents, num_nodes)
    resolved = resolve_backend(backend, logp.device, cuda_unsupported=None if T <= _CUDA_MAX_PATH_NODES else
                               f"handles up to {_CUDA_MAX_PATH_NODES} nodes per row, got {T}")
    if resolved == "torch":
        return path_mean_ref(logp, parents, num_nodes)
    if resolved == "cuda":
        return _cuda.ops().path_mean(logp, parents, num_nodes)
    out = torch.empty(B, T, dtype=torch.float32, device=logp.device)
    if B:
        block_t = 1 << (T - 1).bit_length()
        kernel_module("logprob")._path_mean_kernel[(B,)](
            logp, parents, num_nodes.contiguous(), out, T, *logp.stride(), *parents.stride(),
            BLOCK_T=block_t, ROUNDS=max(1, math.ceil(math.log2(T))), num_warps=4 if block_t >= 512 else 1)
    return out


def token_logprob_from_logits_ref(logits: Tensor, targets: Tensor) -> Tensor:
    """Pure-torch reference of `token_logprob_from_logits`: writes the [N, V] log-softmax in fp32.

    fp64 logits stay fp64 (the tests' exact answer); every other dtype computes and returns fp32.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    return torch.log_softmax(logits, dim=-1).gather(1, targets.to(torch.int64)[:, None])[:, 0]


def token_logprob_ref(hidden: Tensor, weight: Tensor, targets: Tensor, *, bias: Tensor | None = None) -> Tensor:
    """Pure-torch reference of `token_logprob`: torch's ``hidden @ weight.T`` in the input dtype, then fp32.

    With low-precision inputs the logits are rounded to that dtype first, as any torch pipeline does; the
    tests take fp32 (or fp64) copies of the inputs to get the exact answer.
    """
    return token_logprob_from_logits_ref(F.linear(hidden, weight, bias), targets)


def path_mean_ref(logp: Tensor, parents: Tensor, num_nodes: Tensor) -> Tensor:
    """Pure-torch reference of `path_mean` (same contract): pointer jumping, ceil(log2 T) gathers."""
    B, T = logp.shape
    idx = torch.arange(T, device=logp.device)
    scored = (idx > 0) & (idx < num_nodes[:, None])  # real non-root nodes
    parents = parents.to(torch.int64)
    jump = torch.where(scored & (parents < idx), parents, -1)
    total = torch.where(scored, logp, 0.0)
    count = scored.to(torch.int32)
    for _ in range(max(1, math.ceil(math.log2(T)))):
        has = jump >= 0
        safe = jump.clamp(min=0)
        total = total + torch.where(has, total.gather(1, safe), 0.0)
        count = count + torch.where(has, count.gather(1, safe), 0)
        jump = torch.where(has, jump.gather(1, safe), -1)
    return torch.where(count > 0, total / count.clamp(min=1).float(), 0.0)


def _check_targets(targets: Tensor, N: int, V: int, device: torch.device, validate: bool) -> None:
    if targets.shape != (N,):
        raise ValueError(f"targets: expected [{N}], got {tuple(targets.shape)}")
    if targets.dtype not in _INTS:
        raise TypeError(f"targets: expected int32/int64, got {targets.dtype}")
    if targets.device != device:
        raise ValueError(f"targets: on {targets.device}, inputs on {device}")
    if validate and N:
        bad = (targets < 0) | (targets >= V)
        if bool(bad.any()):  # host sync, only with validate=True
            n = int(bad.nonzero()[0, 0])
            raise ValueError(f"targets: entry {n} holds id {int(targets[n])}, outside the vocabulary [0, {V})")


def _validate_tree(parents: Tensor, num_nodes: Tensor) -> None:
    """num_nodes in [1, T]; real non-root nodes have 0 <= parent < own index (one host sync)."""
    T = parents.shape[1]
    bad_n = (num_nodes < 1) | (num_nodes > T)
    if bool(bad_n.any()):
        b = int(bad_n.nonzero()[0, 0])
        raise ValueError(f"num_nodes: row {b} has {int(num_nodes[b])} nodes, expected 1..{T}")
    idx = torch.arange(T, device=parents.device)
    real = (idx > 0) & (idx < num_nodes[:, None])
    bad = real & ((parents < 0) | (parents >= idx))
    if bool(bad.any()):
        b, i = (int(x) for x in bad.nonzero()[0])
        raise ValueError(f"parents: row {b} node {i} has parent {int(parents[b, i])}; every node's parent must "
                         "come before it (topological order)")


def _merge(parts: Tensor, out: Tensor) -> Tensor:
    """Fold the [3, S, N] per-split (max, sumexp, target logit) partials into out [N], splits in order."""
    S, N = parts.shape[1], parts.shape[2]
    block_n = 128 if out.device.type == "cuda" else 32
    kernel_module("logprob")._logprob_merge_kernel[(math.ceil(N / block_n),)](
        parts[0], parts[1], parts[2], out, N, S, BLOCK_N=block_n, num_warps=4 if out.device.type == "cuda" else 1)
    return out


def _matmul_tiles(device: torch.device, N: int, dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """(BLOCK_N, BLOCK_V, BLOCK_D, num_warps, num_stages) of `_token_logprob_kernel`.

    tl.dot needs every tile side >= 16. On the CPU interpreter small tiles keep tests fast and make them
    cross several vocabulary tiles and splits.
    """
    if device.type != "cuda":
        return 16, 64, 16, 1, 1
    block_d = 32 if dtype == torch.float32 else 64  # fp32 tiles take twice the shared memory per stage
    if N >= 128:
        return 128, 128, block_d, 8, 3  # the usual Hopper matmul tile
    return (16 if N <= 16 else 32 if N <= 32 else 64), 128, block_d, 4, 3


def _splits(device: torch.device, row_blocks: int, tiles: int) -> tuple[int, int]:
    """(S, tiles per split): cut the vocabulary so that row_blocks * S programs fill the device."""
    want = 2 * _multiprocessors(device) if device.type == "cuda" else 4
    splits = max(1, min(tiles, math.ceil(want / row_blocks)))
    per_split = math.ceil(tiles / splits)
    return math.ceil(tiles / per_split), per_split


@cache
def _multiprocessors(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count
