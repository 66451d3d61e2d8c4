"""Triton kernels (installed as ``specdec.kernels``): only ``@triton.jit`` code, one op per module.

Launchers, validation and dispatch live in ``specdec.ops``; import these modules lazily from there.
"""
