"""The plain autoregressive supplier and helpers of suppliers; the interface, `Supplier`, is `specdec.stages`'s."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from ..stages import Supplier
from ..state import DecodeState
from ..tree import TreeBatch

__all__ = ["Supplier", "ARSupplier", "root_only", "position_limit", "check_within"]


def position_limit(*models: PreTrainedModel | None) -> int | None:
    """The fewest positions (``max_position_embeddings``) among `models`; None when none declares any."""
    limits = [getattr(m.config.get_text_config(), "max_position_embeddings", None) for m in models if m is not None]
    limits = [n for n in limits if isinstance(n, int)]
    return min(limits) if limits else None


def check_within(name: str, value: int, limit: int | None, what: str) -> None:
    """ValueError naming `name` when `value` exceeds `limit` (None: no limit); `what` says what limits it."""
    if limit is not None and value > limit:
        raise ValueError(f"{name}: {value} exceeds {what} ({limit})")


def root_only(root: torch.Tensor) -> TreeBatch:
    """The tree of plain decoding: each row's root alone. root: [B] int64."""
    B = root.shape[0]
    return TreeBatch(root[:, None], torch.full((B, 1), -1, dtype=torch.int64, device=root.device),
                     torch.ones(B, dtype=torch.int64, device=root.device), max_depth=0)


class ARSupplier(Supplier):
    """Plain autoregressive decoding: proposes the root alone, so each step emits one token."""

    def max_tree_size(self) -> int:
        return 1

    def propose(self, state: DecodeState) -> TreeBatch:
        return root_only(state.root)
