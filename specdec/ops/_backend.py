"""Backend selection shared by every op's launcher.

"torch": the pure-torch reference (the test oracle), runs anywhere. "sdpa": tree attention's production
torch path (`torch.nn.functional.scaled_dot_product_attention` over the live cache region, in the
inputs' dtype); the other ops have no such path. "triton": the Triton kernel, on a CUDA device, or on the
CPU under Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is imported; tests use it).
"cuda": the CUDA C++ kernels of the compiled extension ``specdec._C`` (csrc/), CUDA tensors only.
"auto": for CUDA tensors, triton when Triton is importable, else cuda when the extension is built (and the
op's kernel handles the shapes); otherwise the op's fast torch path where it has one (tree attention: sdpa),
else the reference. Triton comes first because it measured faster on the one GPU the kernels have run on
(H200, bf16, the microbenchmarks' shapes: tree attention faster in 26 of 27 shapes, by 6.8x at the median
and up to 14x; the log-prob scorer 2.6-24x; top-k expansion 2.8-4.6x. The CUDA kernels' wmma products,
staged through shared memory, reached 17-28 TFLOP/s in bf16, 2-4% of the chip's; not profiled yet:
bench/results/2026-12-04-h200-gpu-check/). The CUDA kernels stay available as backend="cuda".
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import torch

BACKENDS = ("auto", "torch", "sdpa", "triton", "cuda")


def triton_runnable(device: torch.device) -> bool:
    """Whether a Triton kernel can run on tensors of `device`."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")


def cuda_extension_built() -> bool:
    """Whether the compiled extension ``specdec._C`` is installed (looked up, not loaded: no CUDA init)."""
    return _find_extension()


@functools.cache
def _find_extension() -> bool:
    try:
        return importlib.util.find_spec("specdec._C") is not None
    except ModuleNotFoundError:  # specdec itself not importable as a package (never in practice)
        return False


# The extension's largest kernel configuration takes 149 KB of shared memory per block (tree attention,
# fp16/bf16, D 128, 64 rows); A100 (sm_80) opts in to 163 KiB, H100/H200 to 227 KiB, but sm_86/89/120
# cards (A10, L4, RTX) only to about 99 KiB, where those launches would fail.
_CUDA_MIN_SHARED_MEMORY = 160 * 1024


@functools.cache
def cuda_device_shortfall(index: int) -> str | None:
    """Why the CUDA kernels cannot run on CUDA device `index` (too little shared memory per block), or
    None when they can. Reads the device's properties (initialises CUDA); cached per device."""
    props = torch.cuda.get_device_properties(index)
    optin = getattr(props, "shared_memory_per_block_optin", 0)
    if optin < _CUDA_MIN_SHARED_MEMORY:
        return (f"needs {_CUDA_MIN_SHARED_MEMORY // 1024} KiB of shared memory per block; {props.name} offers "
                f"{optin // 1024} KiB")
    return None


def _cuda_shortfall(device: torch.device) -> str | None:
    return cuda_device_shortfall(device.index if device.index is not None else torch.cuda.current_device())


def resolve_backend(backend: str, device: torch.device, *, fast_torch: str | None = None,
                    cuda_unsupported: str | None = None) -> str:
    """The backend an op runs on for tensors on `device`; ValueError for unknown or unrunnable choices.

    fast_torch: the op's production torch path ("sdpa" for tree attention), which `auto` picks where
    Triton cannot run; None for ops whose reference is their only torch path.
    cuda_unsupported: why the CUDA kernel cannot serve this call (an op without one, shapes beyond its
    limits), completing "backend: 'cuda' ..."; `auto` then passes over it, and an explicit "cuda" is a
    ValueError saying so. None when it can.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: {backend!r} is not one of {BACKENDS}")
    if backend == "auto":
        if device.type == "cuda":
            if triton_runnable(device):
                return "triton"
            if cuda_unsupported is None and cuda_extension_built() and _cuda_shortfall(device) is None:
                return "cuda"
        return fast_torch or "torch"
    if backend not in ("torch", "triton", "cuda") and backend != fast_torch:
        raise ValueError(f"backend: {backend!r} is tree attention's fast path; this op runs on 'torch', 'triton' "
                         "or 'cuda'")
    if backend == "triton" and not triton_runnable(device):
        raise ValueError(f"backend: 'triton' cannot run on {device}: it needs a CUDA device, or the CPU with "
                         "TRITON_INTERPRET=1 set before triton is imported, and the triton package installed")
    if backend == "cuda":
        if cuda_unsupported is not None:
            raise ValueError(f"backend: 'cuda' {cuda_unsupported}")
        if device.type != "cuda":
            raise ValueError(f"backend: 'cuda' cannot run on {device}: the CUDA kernels need tensors on a CUDA device")
        if not cuda_extension_built():
            raise ValueError("backend: 'cuda' needs the compiled extension specdec._C, which this install lacks; "
                             "build it on a machine with a CUDA build of torch and nvcc: "
                             "SPECDEC_BUILD_CUDA=1 pip install --no-build-isolation .")
        shortfall = _cuda_shortfall(device)
        if shortfall is not None:
            raise ValueError(f"backend: 'cuda' {shortfall}; use 'triton'")
    return backend


def kernel_module(name: str) -> ModuleType:
    """The Triton kernels of one op, ``kernels/<name>.py``, imported on first use.

    Installed, ``kernels/`` is the subpackage ``specdec.kernels``; in a source checkout (tests run with
    the repository on PYTHONPATH, not installed) the file is loaded from the repository under that name.
    A top-level ``kernels`` import is never used: Hugging Face's ``kernels`` package owns that name.
    """
    qualified = f"specdec.kernels.{name}"
    if qualified in sys.modules:
        return sys.modules[qualified]
    try:
        return importlib.import_module(qualified)
    except ModuleNotFoundError as error:
        path = Path(__file__).resolve().parents[2] / "kernels" / f"{name}.py"
        if error.name not in ("specdec.kernels", qualified) or not path.is_file():
            raise
    spec = importlib.util.spec_from_file_location(qualified, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module
