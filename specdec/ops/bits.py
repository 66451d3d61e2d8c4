"""The packed bit layout of ancestor masks: bool [..., N] <-> little-endian int32 words [..., ceil(N/32)].

Bit m of a row (word m // 32, bit m % 32) stands for node (or cache column) m. Example: nodes {0, 1, 3}
-> one word 0b1011. Every op that reads or writes an ancestor mask uses this layout.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["pack_bits", "unpack_bits", "as_int32"]


def pack_bits(bits: Tensor) -> Tensor:
    """Pack a bool tensor [..., N] into little-endian int32 words [..., ceil(N/32)] (bit m of word w: m + 32w)."""
    n = bits.shape[-1]
    words = max(1, math.ceil(n / 32))
    padded = torch.zeros(*bits.shape[:-1], words * 32, dtype=torch.int64, device=bits.device)
    padded[..., :n] = bits.to(torch.int64)
    weights = torch.ones(32, dtype=torch.int64, device=bits.device) << torch.arange(32, device=bits.device)
    packed = (padded.view(*bits.shape[:-1], words, 32) * weights).sum(-1)
    return as_int32(packed)


def unpack_bits(words: Tensor, n: int) -> Tensor:
    """Inverse of `pack_bits`: int32 words [..., W] -> bool [..., n] (n <= 32 W)."""
    shifts = torch.arange(32, device=words.device, dtype=torch.int64)
    bits = (words.to(torch.int64)[..., None] >> shifts) & 1
    return bits.flatten(-2)[..., :n].bool()


def as_int32(words: Tensor) -> Tensor:
    """int64 words in [0, 2^32) -> int32 with the same bit pattern (torch's narrowing cast does not promise it)."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
