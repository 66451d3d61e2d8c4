"""A source checkout on ``sys.path`` (pytest puts the repository root there) must not shadow Hugging Face's
``kernels`` package, which transformers 5.25 requires and imports: the checkout's ``kernels/`` folder (the
Triton kernels, installed as ``specdec.kernels``) has no ``__init__.py``, so it is at most a namespace
portion, and any installed regular ``kernels`` package wins. With an ``__init__.py`` there, transformers
5.25 failed to import (``cannot import name 'CUDAProperties' from 'kernels'``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_does_not_shadow_an_installed_kernels_package(tmp_path):
    installed = tmp_path / "site" / "kernels"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("WHO = 'installed'\n")
    code = ("import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; import kernels; "
            "print(getattr(kernels, 'WHO', 'checkout'))")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path / "site")], capture_output=True,
                         text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "installed"


def test_the_triton_kernels_load_from_the_checkout_under_their_installed_name():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); from specdec.ops._backend import kernel_module; "
            "m = kernel_module('logprob'); print(m.__name__, m.__file__)")
    out = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    name, path = out.stdout.split()
    assert name == "specdec.kernels.logprob" and Path(path).name == "logprob.py"
