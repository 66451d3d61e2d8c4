"""Build script. Metadata lives in pyproject.toml; this file adds the optional CUDA extension specdec._C
(csrc/: the CUDA kernels of the three ops, registered as torch.ops.specdec.*).

The extension is built when torch is importable here, is a CUDA build (torch.version.cuda) and nvcc is
found (CUDA_HOME, or nvcc on PATH); otherwise the package installs as pure Python and every op runs on
Triton or torch. Environment:
  SPECDEC_BUILD_CUDA=0   never build the extension;
  SPECDEC_BUILD_CUDA=1   build it or fail loudly saying why;
  TORCH_CUDA_ARCH_LIST   target architectures (default here "8.0;9.0+PTX": A100, H100/H200, PTX for newer);
  MAX_JOBS               parallel compile jobs (ninja, through torch's BuildExtension).
pip builds in an isolated environment that has setuptools but not torch (pyproject's build requirements),
so the extension needs `pip install --no-build-isolation .` (or `-e .`) in an environment that already
holds a CUDA torch; under isolation torch is missing and the pure-Python package is built (an error with
SPECDEC_BUILD_CUDA=1).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from setuptools import setup

CSRC = Path("csrc")
SOURCES = ["csrc/bindings.cpp", "csrc/tree_attention.cu", "csrc/smart_expand.cu", "csrc/logprob.cu"]
DEFAULT_ARCHS = "8.0;9.0+PTX"


def _cuda_extension_kwargs() -> dict:
    """setup() arguments that build specdec._C, or {} when it is not built (the reason on stderr)."""
    mode = os.environ.get("SPECDEC_BUILD_CUDA", "auto").strip().lower()
    if mode not in ("auto", "0", "1"):
        raise SystemExit(f"SPECDEC_BUILD_CUDA: expected 0 or 1, got {mode!r}")
    if mode == "0":
        return {}

    def skip(reason: str) -> dict:
        if mode == "1":
            raise SystemExit(f"SPECDEC_BUILD_CUDA=1 but the CUDA extension cannot be built: {reason}")
        print(f"specdec: building without the CUDA extension ({reason})", file=sys.stderr)
        return {}

    try:
        import torch
        from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CUDAExtension
    except ImportError:
        return skip("torch is not importable by the build; an isolated build never has it: "
                    "use pip install --no-build-isolation with a CUDA torch installed")
    if not torch.version.cuda:
        return skip(f"torch {torch.__version__} is not a CUDA build")
    if CUDA_HOME is None and shutil.which("nvcc") is None:
        return skip("nvcc not found (set CUDA_HOME or put nvcc on PATH)")
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS)
    headers = sorted(str(p) for p in CSRC.glob("*.cuh")) + sorted(str(p) for p in CSRC.glob("*.h"))
    extension = CUDAExtension(
        name="specdec._C",
        sources=SOURCES,
        depends=headers,
        extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "-lineinfo"]},
    )
    return {"ext_modules": [extension], "cmdclass": {"build_ext": BuildExtension.with_options(use_ninja=True)}}


setup(**_cuda_extension_kwargs())
