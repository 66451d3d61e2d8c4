"""Backend selection shared by every op's launcher.

"torch": the pure-torch reference (the test oracle), runs anywhere. "sdpa": tree attention's production
torch path (`torch.nn.functional.scaled_dot_product_attention` over the live cache region, in the
inputs' dtype); the other ops have no such path. "triton": the Triton kernel, on a CUDA device, or on the
CPU under Triton's interpreter (``TRITON_INTERPRET=1`` set before triton is imported; tests use it).
"auto": triton for CUDA tensors when Triton is importable; otherwise the op's fast torch path where it
has one (tree attention: sdpa), else the reference.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import torch

BACKENDS = ("auto", "torch", "sdpa", "triton")


def triton_runnable(device: torch.device) -> bool:
    """Whether a Triton kernel can run on tensors of `device`."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or (device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1")


def resolve_backend(backend: str, device: torch.device, *, fast_torch: str | None = None) -> str:
    """The backend an op runs on for tensors on `device`; ValueError for unknown or unrunnable choices.

    fast_torch: the op's production torch path ("sdpa" for tree attention), which `auto` picks where
    Triton cannot run; None for ops whose reference is their only torch path.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend: {backend!r} is not one of {BACKENDS}")
    if backend == "auto":
        if device.type == "cuda" and triton_runnable(device):
            return "triton"
        return fast_torch or "torch"
    if backend not in ("torch", "triton") and backend != fast_torch:
        raise ValueError(f"backend: {backend!r} is tree attention's fast path; this op runs on 'torch' or 'triton'")
    if backend == "triton" and not triton_runnable(device):
        raise ValueError(f"backend: 'triton' cannot run on {device}: it needs a CUDA device, or the CPU with "
                         "TRITON_INTERPRET=1 set before triton is imported, and the triton package installed")
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
