"""K1, tree-mask attention: launcher and pure-torch reference (docs/kernels.md, K1).

The launcher checks shapes, dtypes and devices (cheap, always) and dispatches on ``backend``: the
reference `tree_attention_ref` (the oracle), the production torch path `tree_attention_sdpa` (torch's
SDPA over the live cache region, planned once per forward by `sdpa_plan`), the Triton kernels of
``kernels/tree_attention.py``, or the CUDA kernel ``torch.ops.specdec.tree_attention`` (csrc/); prefix
splits are picked here, from shapes only: no host sync.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from . import _cuda
from ._backend import kernel_module, resolve_backend
from .bits import unpack_bits

__all__ = ["tree_attention", "tree_attention_ref", "tree_attention_sdpa", "tree_attention_mask", "SdpaPlan", "sdpa_plan"]

_LOG2E = 1.4426950408889634
# Prefix splitting (flash-decoding): split only while the (b, kv head, row tile) programs fill fewer
# than one wave of SMs, keep at least this many cache slots per split, and at most this many splits.
# Untuned guesses (written without a GPU); bench/bench_tree_attention.py is where to tune them.
_MIN_SLOTS_PER_SPLIT = 256
_MAX_SPLITS = 32  # also the most the CUDA merge kernel takes
_CUDA_MAX_HEAD_DIM = 256


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
    num_splits: int | None = None,
    plan: "SdpaPlan | None" = None,
) -> Tensor:
    """Attention of tree nodes over a per-row cache prefix plus their own ancestors (docs/kernels.md, K1).

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

    num_splits: Triton and CUDA backends: how many programs share each row's prefix, their partial results
               merged by log-sum-exp. None picks it from B * Hkv and S (1 off CUDA); an int forces it
               (tests force the split path on the CPU; the CUDA kernel takes at most 32).
    plan:      sdpa backend only: the live slot count and dense mask from `sdpa_plan`, built once per
               forward and shared by every layer; None plans here over the whole buffer.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v: expected 4-D tensors, got {q.ndim}, {k.ndim}, {v.ndim} dims")
    B, Hq, T, D = q.shape
    if k.shape != v.shape:
        raise ValueError(f"v: shape {tuple(v.shape)} != k {tuple(k.shape)}")
    if k.shape[0] != B or k.shape[3] != D:
        raise ValueError(f"k: expected [{B}, Hkv, S, {D}], got {tuple(k.shape)}")
    Hkv = k.shape[1]
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
    device = q.device  # read once: every layer of every forward runs these checks
    for name, t in (("k", k), ("v", v), ("start", start), ("length", length), ("tree_mask", tree_mask)):
        if t.device != device:
            raise ValueError(f"{name}: on {t.device}, q on {device}")
    if out is not None and (out.shape != q.shape or out.dtype != q.dtype or out.device != device):
        raise ValueError(f"out: expected {tuple(q.shape)} {q.dtype} on {device}, got {tuple(out.shape)} {out.dtype}")
    if num_splits is not None and (not isinstance(num_splits, int) or num_splits < 1):
        raise ValueError(f"num_splits: expected None or an int >= 1, got {num_splits!r}")
    if plan is not None:
        plan.check(B, T, k.shape[2], device)
    scale = D**-0.5 if scale is None else float(scale)

    resolved = resolve_backend(backend, device, fast_torch="sdpa", cuda_unsupported=None if D <= _CUDA_MAX_HEAD_DIM
                               else f"handles head dims up to {_CUDA_MAX_HEAD_DIM}, got {D}")
    if resolved == "cuda":
        return _tree_attention_cuda(q, k, v, start, length, tree_mask, scale, out, num_splits)
    if resolved == "triton":
        return _tree_attention_triton(q, k, v, start, length, tree_mask, scale, out, num_splits)
    if resolved == "sdpa":
        plan = sdpa_plan(start, length, tree_mask, k.shape[2]) if plan is None else plan
        result = tree_attention_sdpa(q, k, v, plan, scale=scale)
    else:
        result = tree_attention_ref(q, k, v, start, length, tree_mask, scale=scale)
    if out is None:
        return result
    return out.copy_(result)


def tree_attention_ref(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    start: Tensor,
    length: Tensor,
    tree_mask: Tensor,
    *,
    scale: float,
    compute_dtype: torch.dtype | None = None,
) -> Tensor:
    """Pure-torch reference of `tree_attention` (same contract). Materialises the dense [B, T, S] mask.

    compute_dtype: the dtype of the scores, softmax and products; default the wider of q's dtype and
    fp32. Tests pass float64 for an exact oracle and q's own low precision for the error baseline.
    """
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    allowed = tree_attention_mask(start, length, tree_mask, S)  # [B, T, S]
    group = Hq // Hkv
    acc = torch.promote_types(q.dtype, torch.float32) if compute_dtype is None else compute_dtype
    kf = k.to(acc).repeat_interleave(group, dim=1)
    vf = v.to(acc).repeat_interleave(group, dim=1)
    scores = torch.matmul(q.to(acc), kf.transpose(-1, -2)) * scale  # [B, Hq, T, S]
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a node with nothing visible gets zeros
    return torch.matmul(probs, vf).to(q.dtype)


def tree_attention_mask(start: Tensor, length: Tensor, tree_mask: Tensor, num_slots: int) -> Tensor:
    """The dense visibility mask of `tree_attention`'s contract: [B, T, num_slots] bool, True where node
    i of row b may read slot s (s in ``[start[b], length[b])``, or ``s = length[b] + m`` with bit m of
    its mask set). Used by the reference (whole buffer) and by `sdpa_plan` (the live slots only)."""
    B, T = tree_mask.shape[:2]
    slots = torch.arange(num_slots, device=tree_mask.device)
    start, length = start.to(torch.int64), length.to(torch.int64)
    prefix = (slots[None, :] >= start[:, None]) & (slots[None, :] < length[:, None])  # [B, S]
    rel = slots[None, :] - length[:, None]  # [B, S]: slot's index in the tree region
    region = tree_mask.shape[2] * 32
    in_tree = (rel >= 0) & (rel < region)
    bits = unpack_bits(tree_mask, region)  # [B, T, region]
    from_tree = torch.gather(bits, 2, rel.clamp(0, region - 1)[:, None, :].expand(B, T, num_slots)) & in_tree[:, None, :]
    return prefix[:, None, :] | from_tree


def _tree_attention_mask_host(start: Tensor, length: Tensor, tree_mask: Tensor, num_slots: int) -> Tensor:
    """`tree_attention_mask` for CPU tensors, in numpy (the same mask; a few numpy calls where torch
    dispatches a dozen small ops)."""
    start, length, words = start.numpy(), length.numpy(), tree_mask.numpy()
    B, T, W = words.shape
    slots = np.arange(num_slots)
    prefix = (slots[None, :] >= start[:, None]) & (slots[None, :] < length[:, None])  # [B, S]
    rel = slots[None, :] - length[:, None]  # [B, S]: slot's index in the tree region
    in_tree = (rel >= 0) & (rel < 32 * W)
    bits = np.unpackbits(np.ascontiguousarray(words).view(np.uint8), axis=2, bitorder="little")  # [B, T, 32 W]
    from_tree = np.take_along_axis(bits, np.clip(rel, 0, 32 * W - 1)[:, None, :].repeat(T, 1), 2).astype(bool)
    return torch.from_numpy(prefix[:, None, :] | (from_tree & in_tree[:, None, :]))


@dataclass(frozen=True)
class SdpaPlan:
    """How the sdpa backend runs one forward's attention; built once per forward (`sdpa_plan`) and
    shared by every layer, so no layer rebuilds a mask.

    kv_len:      host int, slots ``[0, kv_len)`` hold everything any node may see (the live region: the
                 longest row's committed tokens plus the tree region); the rest of the buffer is never read.
    causal_rows: host int, the first nodes of every row form an unpadded chain written to empty rows (a
                 prompt block: node i sees slots ``[0, i]``): computed causally, with no mask.
    mask:        [B, 1, T - causal_rows, kv_len] bool for the other nodes, True = visible; None when they
                 see every live slot (a root-only step over equal, unpadded rows) or when there are none.
    Example: a 5-token unpadded prompt forwarded with a 3-node tree: kv_len 8, causal_rows 5, mask
    [B, 1, 3, 8] (each node: the prompt and its ancestors).
    """

    kv_len: int
    mask: Tensor | None
    causal_rows: int = 0

    def check(self, B: int, T: int, S: int, device: torch.device) -> None:
        if not 1 <= self.kv_len <= S:
            raise ValueError(f"plan: kv_len {self.kv_len} outside the buffer's 1..{S} slots")
        if not 0 <= self.causal_rows <= min(T, self.kv_len):
            raise ValueError(f"plan: causal_rows {self.causal_rows} outside 0..{min(T, self.kv_len)}")
        rest = T - self.causal_rows
        if self.mask is not None and (self.mask.shape != (B, 1, rest, self.kv_len) or self.mask.dtype != torch.bool
                                      or self.mask.device != device):
            raise ValueError(f"plan: mask expected [{B}, 1, {rest}, {self.kv_len}] bool on {device}, got "
                             f"{tuple(self.mask.shape)} {self.mask.dtype} on {self.mask.device}")
        if self.mask is None and self.causal_rows == T and self.kv_len != T:
            raise ValueError(f"plan: an all-causal plan needs kv_len == T, got {self.kv_len} and {T}")


def sdpa_plan(start: Tensor, length: Tensor, tree_mask: Tensor, kv_len: int, *,
              host_start: np.ndarray | None = None, host_length: np.ndarray | None = None,
              causal_rows: int = 0) -> SdpaPlan:
    """Plan a forward's attention over the live slots ``[0, kv_len)`` (kv_len: host int, at least
    ``max(length) + `` the tree region's size).

    With the host copies of start and length (no device sync), the common shapes need little or no
    mask: a root-only step over rows with no padding and equal lengths (no mask: each node sees every
    live slot), and a prompt block (`causal_rows`: the caller's word that the first nodes of every row
    form one chain) written to empty, unpadded rows (causal, no mask; only the nodes after it get one).
    Everything else gets the dense [B, 1, T, kv_len] mask, built here once.
    """
    T = tree_mask.shape[1]
    dense = _tree_attention_mask_host if tree_mask.device.type == "cpu" else tree_attention_mask
    if host_start is not None and host_length is not None and not host_start.any():
        same = bool((host_length == host_length[0]).all())
        if same and kv_len == int(host_length[0]) + 1 and T == 1:
            return SdpaPlan(kv_len, None)
        if same and causal_rows and int(host_length[0]) == 0 and kv_len == T:  # the block starts at slot 0
            if causal_rows == T:
                return SdpaPlan(kv_len, None, causal_rows)
            rest = dense(start, length, tree_mask[:, causal_rows:], kv_len)  # [B, T - causal_rows, S]
            return SdpaPlan(kv_len, rest[:, None], causal_rows)
    return SdpaPlan(kv_len, dense(start, length, tree_mask, kv_len)[:, None])


def tree_attention_sdpa(q: Tensor, k: Tensor, v: Tensor, plan: SdpaPlan, *, scale: float) -> Tensor:
    """`tree_attention` through torch's SDPA (the production path off GPU): only the live slots are
    read, in the inputs' dtype (SDPA accumulates low precision in fp32), grouped-query heads without
    copying K/V (``enable_gqa``). Every node must see at least itself (the contract guarantees it)."""
    k, v = k[:, :, : plan.kv_len], v[:, :, : plan.kv_len]
    gqa = q.shape[1] != k.shape[1]
    c = plan.causal_rows
    if c == 0:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=plan.mask, scale=scale, enable_gqa=gqa)
    head = F.scaled_dot_product_attention(q[:, :, :c], k[:, :, :c], v[:, :, :c], is_causal=True, scale=scale,
                                          enable_gqa=gqa)
    if c == q.shape[2]:
        return head
    tail = F.scaled_dot_product_attention(q[:, :, c:], k, v, attn_mask=plan.mask, scale=scale, enable_gqa=gqa)
    return torch.cat([head, tail], 2)


def _tree_attention_triton(
    q: Tensor, k: Tensor, v: Tensor, start: Tensor, length: Tensor, tree_mask: Tensor, scale: float,
    out: Tensor | None, num_splits: int | None,
) -> Tensor:
    """Allocate, pick tiles and splits, launch `_tree_attention_kernel` (and the merge when split)."""
    kernels = kernel_module("tree_attention")
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = Hq // Hkv
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device) if out is None else out
    block_m, block_n, num_warps, num_stages = _tile_config(q.dtype, group * T, D)
    block_d = max(16, _next_power_of_2(D))
    m_tiles = math.ceil(group * T / block_m)
    splits = num_splits if num_splits is not None else _pick_num_splits(B * Hkv * m_tiles, S, q.device)
    meta = dict(GROUP=group, BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
                DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",  # fp32 stays fp32, never TF32
                num_warps=num_warps, num_stages=num_stages)
    grid = (m_tiles, B * Hkv, splits)
    common = (q, k, v, start.contiguous(), length.contiguous(), tree_mask)  # the kernel reads start[b] at b
    sizes = (scale * _LOG2E, T, S, tree_mask.shape[2], D, Hkv)
    strides = (*q.stride(), *k.stride(), *v.stride(), *tree_mask.stride())
    if splits == 1:  # straight into `out`: no split axis (stride 0), no log-sum-exp (lse_ptr unused)
        ob, oh, ot, od = out.stride()
        kernels._tree_attention_kernel[grid](*common, out, out, *sizes, *strides, ob, oh, ot, 0, od, 0, 0, 0, 0,
                                             SPLIT=False, **meta)
        return out
    part = torch.empty(B, Hq, T, splits, D, dtype=torch.float32, device=q.device)  # normalised partials
    lse = torch.empty(B, Hq, T, splits, dtype=torch.float32, device=q.device)  # base-2 log-sum-exp
    kernels._tree_attention_kernel[grid](*common, part, lse, *sizes, *strides, *part.stride(), *lse.stride(),
                                         SPLIT=True, **meta)
    kernels._tree_attention_merge_kernel[(B * Hq * T,)](
        part, lse, out, Hq, T, D, splits, *part.stride(), *lse.stride(), *out.stride(),
        BLOCK_SPLITS=_next_power_of_2(splits), BLOCK_D=block_d)
    return out


def _tree_attention_cuda(
    q: Tensor, k: Tensor, v: Tensor, start: Tensor, length: Tensor, tree_mask: Tensor, scale: float,
    out: Tensor | None, num_splits: int | None,
) -> Tensor:
    """Pick the prefix splits (the row tile csrc/tree_attention.cuh uses) and call the CUDA op."""
    B, Hq, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    rows = Hq // Hkv * T
    block_m = 16 if rows <= 16 else 64 if q.dtype != torch.float32 and D <= 128 else 32
    if num_splits is not None and num_splits > _MAX_SPLITS:
        raise ValueError(f"num_splits: the CUDA kernel merges at most {_MAX_SPLITS} splits, got {num_splits}")
    splits = num_splits if num_splits is not None else _pick_num_splits(B * Hkv * math.ceil(rows / block_m), S, q.device)
    result = _cuda.ops().tree_attention(q, k, v, start, length, tree_mask, scale, splits)
    return result if out is None else out.copy_(result)


def _tile_config(dtype: torch.dtype, rows: int, D: int) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for `rows` = group * T packed query rows.

    16-bit inputs: up to 128 rows per tile with 64 slots and 8 warps, the FlashAttention-2 forward tile
    for D = 128 on Hopper (compiled for sm_90 with Triton 3.9: wgmma, 246 registers, no spills, 128 KiB
    of shared memory); smaller trees get a smaller tile (tl.dot needs 16 rows). fp32 runs its dots
    exactly on CUDA cores ("ieee"), which keep whole operand tiles in registers: 32 x 32 tiles, 8 warps
    from D = 64 (about 500 bytes of spills at D = 128 instead of 3.6 KB with 64 rows and 4 warps),
    and no software pipelining. BLOCK_N is a multiple of 32 so a tree tile covers whole mask words.
    Head dims above 128 (padded to 256) keep two stages: three need 256 KiB of shared memory at 128 rows,
    over Hopper's 227 KiB, and the launch fails (two: 192 KiB; compiled for sm_90, Triton 3.6 and 3.9).
    """
    if dtype == torch.float32:
        return min(32, max(16, _next_power_of_2(rows))), 32, 8 if D >= 64 else 4, 1
    block_m = min(128, max(16, _next_power_of_2(rows)))
    return block_m, 64, 8 if block_m >= 128 else 4, 3 if D <= 128 else 2


def _pick_num_splits(programs: int, S: int, device: torch.device) -> int:
    """Prefix splits for `programs` (b, kv head, row tile) programs over a cache of S slots.

    One split while the programs fill the GPU's SMs; otherwise enough splits for about one program per
    SM, bounded by S (the buffer's capacity: the split sizes follow each row's actual prefix on the
    device, with no host sync). Off CUDA (the interpreter) always 1.
    """
    if device.type != "cuda":
        return 1
    sms = _sm_count(device.index if device.index is not None else torch.cuda.current_device())
    if programs >= sms:
        return 1
    return max(1, min(math.ceil(sms / programs), S // _MIN_SLOTS_PER_SPLIT, _MAX_SPLITS))


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()
