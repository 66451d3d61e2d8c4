"""Microbenchmark of K1 tree-mask attention: our Triton kernel against the ways one could do it instead.

    PYTHONPATH=. pytest bench/bench_tree_attention.py --benchmark-only

Providers, each on the same q/k/v and tree (Llama-3-8B heads: Hq 32, Hkv 8, D 128, bf16; every row's
prefix is `prefix` slots, the tree's K/V right after it):
- ours:       `ops.tree_attention(backend="triton")`, bitmask in, no dense mask;
- cuda:       `ops.tree_attention(backend="cuda")`, the CUDA C++ kernel (csrc/), when specdec._C is built;
              its rows carry `vs_triton`, the speedup over `ours` in the same run;
- sdpa_dense: `F.scaled_dot_product_attention` with a dense boolean [B, 1, T, prefix + T] mask and K/V
              heads repeated to Hq (what transformers does for SDPA with a custom mask);
- flex:       FlexAttention with a block mask whose mask_mod reads the same bitmask (compiled; only at
              B = 8, prefix 4096, to bound compile time);
- flashinfer: FlashInfer's ragged prefill with a custom mask, when flashinfer is installed;
- causal:     SDPA with a lower-right causal mask and no tree at all: the upper bound for the same sizes;
- torch:      the reference `ops.tree_attention_ref` (dense fp32), only where it fits in memory; the one
              provider that runs on a CPU (one small shape), so the file runs anywhere.

Each row records the median time, GB/s (K and V of prefix + tree read once), TFLOP/s
(4 B Hq T (prefix + T) D) and the fraction of the roofline floor max(bytes / bandwidth, FLOPs / peak)
at H200 peaks; `vs_sdpa_dense` is the speedup over sdpa_dense measured in the same run.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import random

import pytest
import torch
import torch.nn.functional as F
from conftest import measure

from specdec import ops
from specdec.tree import TreeBatch, unpack_bits

H200_HBM_BYTES_PER_S = 4.8e12  # HBM3e bandwidth, NVIDIA H200 SXM datasheet
H200_BF16_DENSE_FLOPS = 989e12  # dense bf16 tensor-core peak, NVIDIA H200 SXM datasheet
HQ, HKV, D = 32, 8, 128  # Llama-3-8B attention
DTYPE = torch.bfloat16
BATCHES, TREES, PREFIXES = (1, 8, 32), (16, 64, 256), (1024, 4096, 16384)
MEMORY_LIMIT = 20 * 2**30  # bytes one case may allocate
CPU_SHAPE = (1, 16, 1024)  # (B, T, prefix) for the reference on a CPU
GPU_PROVIDERS = ("sdpa_dense", "ours", "cuda", "flex", "flashinfer", "causal", "torch")
HAS_FLASHINFER = importlib.util.find_spec("flashinfer") is not None
HAS_CUDA_EXT = importlib.util.find_spec("specdec._C") is not None


def footprint(provider: str, B: int, T: int, prefix: int) -> int:
    """Bytes a provider allocates at one shape (inputs included), to drop the cases that do not fit."""
    S = prefix + T
    size = DTYPE.itemsize
    kv = 2 * B * HKV * S * D * size
    if provider == "sdpa_dense":
        return kv + 2 * B * HQ * S * D * size + B * T * S * (1 + size)  # repeated heads, mask and its bias
    if provider == "torch":
        return kv + 2 * B * HQ * S * D * 4 + 3 * B * HQ * T * S * 4  # fp32 repeated K/V, scores, probs
    return kv


def cases() -> list[tuple[str, int, int, int]]:
    """(provider, B, T, prefix), shape-major so one shape's inputs are built once for all providers."""
    out = [("torch", *CPU_SHAPE)]
    for B, T, prefix in itertools.product(BATCHES, TREES, PREFIXES):
        for provider in GPU_PROVIDERS:
            if provider == "flex" and (B, prefix) != (8, 4096):
                continue
            if footprint(provider, B, T, prefix) <= MEMORY_LIMIT and (provider, B, T, prefix) != out[0]:
                out.append((provider, B, T, prefix))
    return out


@functools.lru_cache(maxsize=1)
def make_inputs(B: int, T: int, prefix: int, device: str) -> dict:
    """q [B, Hq, T, D]; k, v [B, Hkv, prefix + T, D]; start, length [B]; a random tree's mask [B, T, W]."""
    gen = torch.Generator(device).manual_seed(0)
    S = prefix + T
    rng = random.Random(0)
    parents = [[-1] + [rng.randrange(max(0, i - 8), i) for i in range(1, T)] for _ in range(B)]  # bushy, deep
    tree = TreeBatch.from_parents([list(range(T))] * B, parents, device=device, validate=False)
    return dict(q=torch.randn(B, HQ, T, D, generator=gen, device=device, dtype=DTYPE),
                k=torch.randn(B, HKV, S, D, generator=gen, device=device, dtype=DTYPE),
                v=torch.randn(B, HKV, S, D, generator=gen, device=device, dtype=DTYPE),
                start=torch.zeros(B, dtype=torch.int64, device=device),
                length=torch.full((B,), prefix, dtype=torch.int64, device=device),
                mask=tree.ancestor_mask)


def provider_fn(provider: str, x: dict, T: int, prefix: int):
    """A no-argument callable computing the attention with `provider`; setup (masks, plans) done here."""
    q, k, v, start, length, mask = x["q"], x["k"], x["v"], x["start"], x["length"], x["mask"]
    B, S, group, scale = q.shape[0], k.shape[2], HQ // HKV, D**-0.5
    if provider == "ours":
        return lambda: ops.tree_attention(q, k, v, start, length, mask, backend="triton")
    if provider == "cuda":
        return lambda: ops.tree_attention(q, k, v, start, length, mask, backend="cuda")
    if provider == "torch":
        return lambda: ops.tree_attention_ref(q, k, v, start, length, mask, scale=scale)
    if provider == "causal":
        from torch.nn.attention.bias import causal_lower_right

        bias = causal_lower_right(T, S)
        return lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=True)
    if provider == "sdpa_dense":
        dense = torch.cat([torch.ones(B, T, prefix, dtype=torch.bool, device=q.device), unpack_bits(mask, T)], -1)
        kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
        return lambda: F.scaled_dot_product_attention(q, kr, vr, attn_mask=dense[:, None])
    if provider == "flex":
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        region = 32 * mask.shape[2]

        def mask_mod(b, h, q_idx, kv_idx):
            rel = (kv_idx - length[b]).clamp(0, region - 1)
            bit = (mask[b, q_idx, rel // 32] >> (rel % 32)) & 1
            tree_slot = (kv_idx >= length[b]) & (kv_idx < length[b] + region) & (bit == 1)
            return ((kv_idx >= start[b]) & (kv_idx < length[b])) | tree_slot

        block_mask = create_block_mask(mask_mod, B, None, T, S, device=q.device)
        compiled = torch.compile(flex_attention)
        return lambda: compiled(q, k, v, block_mask=block_mask, enable_gqa=True)
    if provider == "flashinfer":
        import flashinfer

        dense = torch.cat([torch.ones(B, T, prefix, dtype=torch.bool, device=q.device), unpack_bits(mask, T)], -1)
        qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=q.device) * T
        kv_indptr = torch.arange(B + 1, dtype=torch.int32, device=q.device) * S
        workspace = torch.empty(128 * 2**20, dtype=torch.uint8, device=q.device)
        wrapper = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(workspace, kv_layout="NHD")
        wrapper.plan(qo_indptr, kv_indptr, HQ, HKV, D, custom_mask=dense.flatten(), causal=False, q_data_type=DTYPE)
        q_nhd = q.transpose(1, 2).reshape(B * T, HQ, D)
        k_nhd, v_nhd = (t.transpose(1, 2).reshape(B * S, HKV, D) for t in (k, v))
        return lambda: wrapper.run(q_nhd, k_nhd, v_nhd)
    raise ValueError(f"provider: unknown {provider!r}")


SPEEDUP_BASE: dict[tuple[int, int, int], float] = {}  # sdpa_dense median per shape, this run
TRITON_BASE: dict[tuple[int, int, int], float] = {}  # ours (Triton) median per shape, this run


@pytest.mark.parametrize("provider, B, T, prefix", cases())
def test_tree_attention(benchmark, provider, B, T, prefix):
    cuda = torch.cuda.is_available()
    if not cuda and (provider, B, T, prefix) != ("torch", *CPU_SHAPE):
        pytest.skip("GPU provider or shape: no CUDA device here (the CPU runs only the reference at one shape)")
    if provider == "flashinfer" and not HAS_FLASHINFER:
        pytest.skip("flashinfer is not installed")
    if provider == "cuda" and not HAS_CUDA_EXT:
        pytest.skip("the CUDA extension specdec._C is not built")
    x = make_inputs(B, T, prefix, "cuda" if cuda else "cpu")
    fn = provider_fn(provider, x, T, prefix)
    S = prefix + T
    nbytes = 2 * B * HKV * S * D * DTYPE.itemsize
    flops = 4 * B * HQ * T * S * D
    row = measure(benchmark, fn, rounds=10, warmup=3, op="tree_attention", provider=provider, dtype=str(DTYPE),
                  B=B, Hq=HQ, Hkv=HKV, D=D, T=T, prefix=prefix)
    seconds = row["median_us"] * 1e-6
    floor = max(nbytes / H200_HBM_BYTES_PER_S, flops / H200_BF16_DENSE_FLOPS)
    row.update(gbps=nbytes / seconds / 1e9, tflops=flops / seconds / 1e12, roofline_fraction=floor / seconds)
    if provider == "sdpa_dense":
        SPEEDUP_BASE[B, T, prefix] = seconds
    elif (B, T, prefix) in SPEEDUP_BASE:
        row["vs_sdpa_dense"] = SPEEDUP_BASE[B, T, prefix] / seconds
    if provider == "ours":
        TRITON_BASE[B, T, prefix] = seconds
    elif provider == "cuda" and (B, T, prefix) in TRITON_BASE:
        row["vs_triton"] = TRITON_BASE[B, T, prefix] / seconds
    benchmark.extra_info.update({k: row[k] for k in ("gbps", "tflops", "roofline_fraction")})
