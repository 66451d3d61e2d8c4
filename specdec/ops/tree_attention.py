"""K1, tree-mask attention: launcher and pure-torch reference (DESIGN 4).

The launcher checks shapes, dtypes and devices (cheap, always) and dispatches on ``backend``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..tree import unpack_bits
from ._backend import resolve_backend

__all__ = ["tree_attention", "tree_attention_ref"]


def tree_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    start: Tensor,
    length: Tensor,
    tree_mask: Tensor,
    *,
    scale: float | None = None,
    out: Tensor | None = None,
    backend: str = "auto",
) -> Tensor:
    """Attention of tree nodes over a per-row cache prefix plus their own ancestors (DESIGN K1).

    q:         [B, Hq, T, D] fp16/bf16/fp32, the T tree nodes' queries (RoPE applied).
    k, v:      [B, Hkv, S, D] same dtype, the cache buffers; Hq % Hkv == 0 (grouped-query attention).
    start:     [B] int32/int64, first valid cache slot of each row (left padding before it).
    length:    [B] int32/int64, committed slots of each row; the tree region begins at slot length[b].
    tree_mask: [B, T, W] int32, little-endian bit m of node i set iff slot ``length[b] + m`` is node i
               or one of its ancestors. W >= ceil(T/32): W is larger when the queries are the newest
               nodes of a tree grown layer by layer (the draft), whose earlier nodes sit before them.
               Padding nodes set only their own bit.
    scale:     softmax scale, default D ** -0.5.

    Node i of row b attends to slots ``[start[b], length[b])`` and to ``length[b] + m`` for each bit m
    of its mask. Example, T = 3, root with two children: masks [0b001, 0b011, 0b101]; node 2 sees the
    prefix, the root (slot length) and itself (slot length + 2), not its sibling.
    Returns [B, Hq, T, D] in q's dtype (written to `out` when given); accumulation is fp32.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v: expected 4-D tensors, got {q.ndim}, {k.ndim}, {v.ndim} dims")
    B, Hq, T, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} != k {tuple(k.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k: expected [{B}, Hkv, S, {D}], got {tuple(k.shape)}")
    Hkv, S = k.shape[1], k.shape[2]
    if Hq % Hkv:
        raise ValueError(f"q: {Hq} query heads are not a multiple of the {Hkv} key/value heads")
    if q.dtype not in (torch.float16, torch.bfloat16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k, v: expected one dtype among fp16/bf16/fp32, got {q.dtype}, {k.dtype}, {v.dtype}")
    for name, t in (("start", start), ("length", length)):
        if t.shape != (B,) or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"{name}: expected [{B}] int32/int64, got {tuple(t.shape)} {t.dtype}")
    W = math.ceil(T / 32)
    if tree_mask.ndim != 3 or tree_mask.shape[:2] != (B, T) or tree_mask.shape[2] < W or tree_mask.dtype != torch.int32:
        raise ValueError(f"tree_mask: expected [{B}, {T}, >={W}] int32, got {tuple(tree_mask.shape)} {tree_mask.dtype}")
    for name, t in (("k", k), ("v", v), ("start", start), ("length", length), ("tree_mask", tree_mask)):
        if t.device != q.device:
            raise ValueError(f"{name}: on {t.device}, q on {q.device}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != q.device):
        raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} on {q.device}, got {tuple(out.shape)} {out.dtype}")
    scale = D**-0.5 if scale is None else float(scale)

    resolve_backend(backend, q.device)
    result = tree_attention_ref(q, k, v, start, length, tree_mask, scale=scale)
    if out is None:
        return result
    return out.copy_(result)


def tree_attention_ref(
    q: Tensor, k: Tensor, v: Tensor, start: Tensor, length: Tensor, tree_mask: Tensor, *, scale: float
) -> Tensor:
    """Pure-torch reference of `tree_attention` (same contract). Materialises the dense [B, T, S] mask."""
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    slots = torch.arange(S, device=q.device)
    start, length = start.to(torch.int64), length.to(torch.int64)
    prefix = (slots[None, :] >= start[:, None]) & (slots[None, :] < length[:, None])  # [B, S]
    rel = slots[None, :] - length[:, None]  # [B, S]: slot's index in the tree region
    region = tree_mask.shape[2] * 32
    in_tree = (rel >= 0) & (rel < region)
    bits = unpack_bits(tree_mask, region)  # [B, T, region]
    from_tree = torch.gather(bits, 2, rel.clamp(0, region - 1)[:, None, :].expand(B, T, S)) & in_tree[:, None, :]
    allowed = prefix[:, None, :] | from_tree  # [B, T, S]
    group = Hq // Hkv
    kf = k.float().repeat_interleave(group, dim=1)
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.matmul(q.float(), kf.transpose(-1, -2)) * scale  # [B, Hq, T, S]
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a node with nothing visible gets zeros
    return torch.matmul(probs, vf).to(q.dtype)
