"""Microbenchmark of K2 smart_expand: our two Triton kernels against the torch reference pipeline.

    PYTHONPATH=. pytest bench/bench_smart_expand.py --benchmark-only

One SMART layer: B 32 rows, F 64 frontier slots (a quarter inactive), top k = 8 children each, draft
logits in bf16 over V = 32000 (Llama 2) or 128256 (Llama 3).
- ours:  `ops.smart_expand(backend="triton")`: one streaming pass over the logits (running log-sum-exp
         and top-k per frontier slot), then one program per row sorts the F*k candidates and runs the
         prefix test;
- cuda:  `ops.smart_expand(backend="cuda")`: the CUDA C++ kernels (radix-select top-k, then the same
         per-row test), when specdec._C is built;
- torch: `ops.smart_expand_ref`: fp32 copy, int64 tie-break keys, topk, log_softmax, sort, cumsum.
The CPU runs only the torch provider at one small shape, so the file runs anywhere.

Each row records the median time, GB/s over the active slots' logits read once, the fraction of H200 HBM bandwidth,
the peak memory of a call (``torch.cuda.max_memory_allocated`` after a reset; inputs included) and the
workspace above the inputs; `vs_torch` is the speedup over the torch provider measured in the same run.
"""

from __future__ import annotations

import functools
import importlib.util

import pytest
import torch
from conftest import measure, peak_memory

from specdec import ops

H200_HBM_BYTES_PER_S = 4.8e12  # HBM3e bandwidth, NVIDIA H200 SXM datasheet
B, F, K = 32, 64, 8
VOCABS = (32000, 128256)
DTYPE = torch.bfloat16
CPU_CASE = (2, 8, 4, 1000, torch.float32)  # (B, F, k, V, dtype) of the torch provider on a CPU
ARGS = dict(alpha=0.8, budget=64, benefit="paper")
HAS_CUDA_EXT = importlib.util.find_spec("specdec._C") is not None


def cases() -> list[tuple[str, int, int, int, int, torch.dtype]]:
    """(provider, B, F, k, V, dtype); torch first at each shape so `vs_torch` has its baseline."""
    out = [("torch", *CPU_CASE)]
    for V in VOCABS:
        out += [("torch", B, F, K, V, DTYPE), ("ours", B, F, K, V, DTYPE), ("cuda", B, F, K, V, DTYPE)]
    return out


@functools.lru_cache(maxsize=1)
def make_inputs(b: int, f: int, v: int, dtype: torch.dtype, device: str) -> dict:
    """Logits [b, f, v] of a few units, a quarter of the frontier inactive, mid-size trees."""
    gen = torch.Generator(device).manual_seed(0)
    logits = (3.0 * torch.randn(b, f, v, generator=gen, device=device)).to(dtype)
    flogp = -3.0 * torch.rand(b, f, generator=gen, device=device)
    flogp = torch.where(torch.rand(b, f, generator=gen, device=device) < 0.25, float("-inf"), flogp)
    return dict(logits=logits, frontier_logp=flogp,
                tree_size=torch.randint(1, 16, (b,), generator=gen, device=device),
                expected_len=1.0 + 2.0 * torch.rand(b, generator=gen, device=device),
                num_paths=torch.randint(1, 8, (b,), generator=gen, device=device),
                cost=torch.tensor([1.0, 0.01, 0.002, 0.01, 1.3], device=device))


BASELINE: dict[tuple, float] = {}  # torch median per shape, this run


@pytest.mark.parametrize("provider, b, f, k, v, dtype", cases())
def test_smart_expand(benchmark, provider, b, f, k, v, dtype):
    cuda = torch.cuda.is_available()
    if not cuda and (b, f, k, v, dtype) != CPU_CASE:
        pytest.skip("GPU provider or shape: no CUDA device here (the CPU runs only the reference at one shape)")
    if provider == "cuda" and not HAS_CUDA_EXT:
        pytest.skip("the CUDA extension specdec._C is not built")
    x = make_inputs(b, f, v, dtype, "cuda" if cuda else "cpu")
    if provider in ("ours", "cuda"):
        fn = functools.partial(ops.smart_expand, **x, k=k, **ARGS, backend="triton" if provider == "ours" else "cuda")
    else:
        fn = functools.partial(ops.smart_expand_ref, **x, k=k, **ARGS)
    memory = peak_memory(fn) if cuda else {}
    row = measure(benchmark, fn, rounds=20, warmup=3, op="smart_expand", provider=provider, dtype=str(dtype),
                  B=b, F=f, k=k, V=v, **memory)
    active = int((x["frontier_logp"] != float("-inf")).sum())  # inactive slots' logits are never read
    nbytes = active * v * dtype.itemsize
    seconds = row["median_us"] * 1e-6
    row.update(gbps=nbytes / seconds / 1e9, hbm_fraction=nbytes / H200_HBM_BYTES_PER_S / seconds)
    shape = (b, f, k, v, dtype)
    if provider == "torch":
        BASELINE[shape] = seconds
    elif shape in BASELINE:
        row["vs_torch"] = BASELINE[shape] / seconds
    benchmark.extra_info.update({key: row[key] for key in ("gbps", "hbm_fraction", "vs_torch") if key in row})
