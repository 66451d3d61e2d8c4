"""The compiled CUDA kernels (``specdec._C``, built from csrc/): loaded on first use, never at import.

Importing the extension registers the ops ``torch.ops.specdec.{tree_attention, smart_expand,
token_logprob, token_logprob_from_logits, path_mean}`` (schemas and CUDA kernels, csrc/bindings.cpp);
`ops()` adds their fake (meta) kernels, which give torch.compile and FakeTensor tracing the output shapes
without running anything. The launchers in this package validate and call these ops for ``backend="cuda"``.
"""

from __future__ import annotations

import importlib

import torch
from torch import Tensor

__all__ = ["ops", "FAKES"]

_loaded = False


def ops():
    """``torch.ops.specdec`` with the extension loaded and its fake kernels registered (once)."""
    global _loaded
    if not _loaded:
        try:
            importlib.import_module("specdec._C")
        except ImportError as error:
            raise RuntimeError(
                "specdec's CUDA extension (specdec._C) could not be loaded: it is built only by an install on a "
                "machine with a CUDA build of torch and nvcc (SPECDEC_BUILD_CUDA=1 pip install "
                f"--no-build-isolation .). Use backend='triton' or 'torch' instead. Cause: {error}") from error
        for name, fake in FAKES.items():
            torch.library.register_fake(f"specdec::{name}", fake)
        _loaded = True
    return torch.ops.specdec


# Fake kernels: the outputs' shapes, dtypes and devices (contiguous, as the CUDA launchers allocate them).

def _tree_attention_fake(q: Tensor, k: Tensor, v: Tensor, start: Tensor, length: Tensor, tree_mask: Tensor,
                         scale: float, num_splits: int) -> Tensor:
    return q.new_empty(q.shape)


def _smart_expand_fake(logits: Tensor, frontier_logp: Tensor, tree_size: Tensor, expected_len: Tensor,
                       num_paths: Tensor, cost: Tensor, k: int, alpha: float, budget: int,
                       paper: bool) -> tuple[Tensor, ...]:
    B, F = logits.shape[0], logits.shape[1]
    cand = (B, F * k)
    return (logits.new_empty(cand, dtype=torch.int64), logits.new_empty(cand, dtype=torch.int64),
            logits.new_empty(cand, dtype=torch.float32), logits.new_empty(cand, dtype=torch.bool),
            logits.new_empty((B,), dtype=torch.int64), logits.new_empty((B,), dtype=torch.float32))


def _token_logprob_fake(hidden: Tensor, weight: Tensor, targets: Tensor, bias: Tensor | None, splits: int) -> Tensor:
    return hidden.new_empty((hidden.shape[0],), dtype=torch.float32)


def _token_logprob_from_logits_fake(logits: Tensor, targets: Tensor) -> Tensor:
    return logits.new_empty((logits.shape[0],), dtype=torch.float32)


def _path_mean_fake(logp: Tensor, parents: Tensor, num_nodes: Tensor) -> Tensor:
    return logp.new_empty(logp.shape)


FAKES = {
    "tree_attention": _tree_attention_fake,
    "smart_expand": _smart_expand_fake,
    "token_logprob": _token_logprob_fake,
    "token_logprob_from_logits": _token_logprob_from_logits_fake,
    "path_mean": _path_mean_fake,
}
