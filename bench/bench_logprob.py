"""Microbenchmark of K3 token_logprob (ValuSpec scoring): our Triton kernel against the alternatives.

    PYTHONPATH=. pytest bench/bench_logprob.py --benchmark-only

Providers, each on the same bf16 hidden states [N, d], LM head [V, d] and targets [N]:
- ours:  `ops.token_logprob(backend="triton")`: tiles over V with a running log-sum-exp, never writes
         the [N, V] logits, deterministic merge of the vocabulary splits;
- cuda:  `ops.token_logprob(backend="cuda")`: the CUDA C++ kernel (csrc/), when specdec._C is built;
- torch: `ops.token_logprob_ref`: ``log_softmax((hidden @ W.T).float()).gather`` (writes [N, V] twice);
- liger: Liger-Kernel's fused linear cross entropy with reduction="none" (its loss is -logprob), when
         `liger_kernel` is installed.
Shapes: N in {64, 1024} nodes, V in {32000, 152064} (Llama 2, Qwen 2), d in {896, 4096} (Qwen2-0.5B,
a 7B-class scorer). The CPU runs only the torch provider at one small fp32 shape, so the file runs
anywhere.

Each row records the median time, TFLOP/s (2 N V d), the peak memory of a call
(``torch.cuda.max_memory_allocated`` after a reset; inputs included) and the workspace above the inputs;
`vs_torch` is the speedup over the torch provider measured in the same run.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools

import pytest
import torch
from conftest import measure, peak_memory

from specdec import ops

H200_BF16_DENSE_FLOPS = 989e12  # dense bf16 tensor-core peak, NVIDIA H200 SXM datasheet
DTYPE = torch.bfloat16
NODES, VOCABS, WIDTHS = (64, 1024), (32000, 152064), (896, 4096)
CPU_CASE = (64, 8192, 256, torch.float32)  # (N, V, d, dtype) of the torch provider on a CPU
PROVIDERS = ("torch", "ours", "cuda", "liger")
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None
HAS_CUDA_EXT = importlib.util.find_spec("specdec._C") is not None


def cases() -> list[tuple[str, int, int, int, torch.dtype]]:
    """(provider, N, V, d, dtype), shape-major with torch first so `vs_torch` has its baseline."""
    out = [("torch", *CPU_CASE)]
    for N, V, d in itertools.product(NODES, VOCABS, WIDTHS):
        out += [(provider, N, V, d, DTYPE) for provider in PROVIDERS]
    return out


@functools.lru_cache(maxsize=1)
def make_inputs(N: int, V: int, d: int, dtype: torch.dtype, device: str) -> tuple[torch.Tensor, ...]:
    """hidden [N, d], weight [V, d] scaled for logits of a few units, targets [N]."""
    gen = torch.Generator(device).manual_seed(0)
    hidden = torch.randn(N, d, generator=gen, device=device).to(dtype)
    weight = (3.0 / d**0.5 * torch.randn(V, d, generator=gen, device=device)).to(dtype)
    targets = torch.randint(0, V, (N,), generator=gen, device=device)
    return hidden, weight, targets


def provider_fn(provider: str, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor):
    if provider == "ours":
        return functools.partial(ops.token_logprob, hidden, weight, targets, backend="triton")
    if provider == "cuda":
        return functools.partial(ops.token_logprob, hidden, weight, targets, backend="cuda")
    if provider == "torch":
        return functools.partial(ops.token_logprob_ref, hidden, weight, targets)
    if provider == "liger":
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        loss = LigerFusedLinearCrossEntropyLoss(reduction="none")
        return lambda: loss(weight, hidden, targets)
    raise ValueError(f"provider: unknown {provider!r}")


BASELINE: dict[tuple, float] = {}  # torch median per shape, this run


@pytest.mark.parametrize("provider, N, V, d, dtype", cases())
def test_token_logprob(benchmark, provider, N, V, d, dtype):
    cuda = torch.cuda.is_available()
    if not cuda and (N, V, d, dtype) != CPU_CASE:
        pytest.skip("GPU provider or shape: no CUDA device here (the CPU runs only the reference at one shape)")
    if provider == "liger" and not HAS_LIGER:
        pytest.skip("liger_kernel is not installed")
    if provider == "cuda" and not HAS_CUDA_EXT:
        pytest.skip("the CUDA extension specdec._C is not built")
    fn = provider_fn(provider, *make_inputs(N, V, d, dtype, "cuda" if cuda else "cpu"))
    memory = peak_memory(fn) if cuda else {}
    row = measure(benchmark, fn, rounds=20, warmup=3, op="token_logprob", provider=provider, dtype=str(dtype),
                  N=N, V=V, d=d, **memory)
    seconds = row["median_us"] * 1e-6
    flops = 2 * N * V * d
    row.update(tflops=flops / seconds / 1e12, peak_fraction=flops / H200_BF16_DENSE_FLOPS / seconds)
    shape = (N, V, d, dtype)
    if provider == "torch":
        BASELINE[shape] = seconds
    elif shape in BASELINE:
        row["vs_torch"] = BASELINE[shape] / seconds
    benchmark.extra_info.update({key: row[key] for key in ("tflops", "peak_fraction", "vs_torch") if key in row})
