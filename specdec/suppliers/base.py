"""The supplier interface and the plain autoregressive supplier."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from transformers import PreTrainedModel

from ..planner import PlanStats, StepRecord
from ..state import DecodeState
from ..tree import TreeBatch
from ..verify import Acceptance

__all__ = ["Supplier", "ARSupplier", "root_only", "position_limit", "check_within"]


class Supplier(ABC):
    """Proposes one candidate tree per row each step.

    Life cycle per `generate` call: `attach(target)` once when the generator is built (compatibility
    checks), `start(state)` after the target's prefill, then per step `propose(state)`, `commit(acceptance)`
    and `record_step(step)`; `report()` at the end of the call. `max_tree_size(batch_size)` bounds the nodes per row (root included) of every
    proposed tree, so caches are sized before decoding starts.
    """

    def attach(self, target: PreTrainedModel) -> None:
        """Check that this supplier can serve `target` (vocabulary, device); raise ValueError if not."""

    def start(self, state: DecodeState) -> None:
        """Prepare for a new batch of prompts (prefill a draft model's cache, ...)."""

    @abstractmethod
    def max_tree_size(self) -> int: ...

    @abstractmethod
    def propose(self, state: DecodeState) -> TreeBatch: ...

    def commit(self, acceptance: Acceptance) -> None:
        """Learn what the target accepted (advance a draft cache, ...)."""

    def feature_layers(self) -> tuple[int, ...] | None:
        """Indices of the target's ``hidden_states`` tuple (`attention.FeatureCapture`) whose values this
        supplier needs at the accepted positions (and the prompt's) in every `Acceptance`; None: none."""
        return None

    def record_step(self, step: StepRecord) -> None:
        """What the loop measured in the step just committed (stage times, width, accepted lengths); the
        suppliers that plan their steps (SMART, retrieval and prompt lookup with a cost model) learn from it.
        Not called for a call's first step, which also reads the prompt."""

    def report(self) -> PlanStats | None:
        """The step planner's report since `start` (None for suppliers without one)."""
        return None

    def memory_bytes(self, batch_size: int, capacity: int) -> dict[str, int]:
        """Device bytes a `generate` call at `batch_size` with target caches of `capacity` slots makes this
        supplier allocate (its model's cache, tree buffers, the largest per-layer temporaries), keyed by
        the argument that drives them; `SpeculativeGenerator` checks the total against free memory before
        allocating anything."""
        return {}


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
