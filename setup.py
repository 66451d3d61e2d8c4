"""Build script. Metadata lives in pyproject.toml; this file exists for the compiled extension, which the
CUDA kernels issue adds (csrc/ -> specdec._C, built only when a CUDA torch and nvcc are present)."""

from setuptools import setup

setup()
