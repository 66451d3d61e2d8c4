"""The interfaces of the generation loop's stages, for writing a supplier or a filter (DecodeState and
Sampling are the other types they see), and the records the loop hands them and gets back.

One step of `SpeculativeGenerator.generate`: a `Supplier` proposes a `TreeBatch`, an optional `TreeFilter`
keeps a subset of it, the `TreeVerifier` accepts a path per row (`Acceptance`), and both stages `commit`
it; then the loop's measurements of the step (`StepRecord`) go to `record_step`. At the end of a call,
`report()` gives a supplier's `PlanStats` (suppliers with a step planner) or a filter's `FilterStats`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, fields

import numpy as np
from transformers import PreTrainedModel

from .state import DecodeState
from .tree import TreeBatch
from .verify import Acceptance

__all__ = ["Supplier", "TreeFilter", "StepRecord", "PlanStats", "FilterStats"]


class Supplier(ABC):
    """Proposes one candidate tree per row each step.

    Life cycle per `generate` call: `attach(target)` once when the generator is built (compatibility
    checks), `start(state)` after the target's prefill, then per step `propose(state)`, `commit(acceptance)`
    and `record_step(step)`; `report()` at the end of the call. `max_tree_size()` bounds the nodes per row
    (root included) of every proposed tree, at any batch size, so caches are sized before decoding starts.
    """

    def attach(self, target: PreTrainedModel) -> None:
        """Check that this supplier can serve `target` (vocabulary, device); raise ValueError if not."""

    def start(self, state: DecodeState) -> None:
        """Prepare for a new batch of prompts (prefill a draft model's cache, ...)."""

    @abstractmethod
    def max_tree_size(self) -> int:
        """The most nodes per row, root included, of any tree `propose` returns (the same for every batch
        size): the target's and the filter's caches are sized by it before decoding starts."""

    @abstractmethod
    def propose(self, state: DecodeState) -> TreeBatch:
        """One candidate tree per row of `state` (rooted at ``state.root``; rows that finished may get any
        tree, they are cut to the root), at most `max_tree_size()` nodes per row."""

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


class TreeFilter(ABC):
    """Optional stage between supplier and verifier: returns a subset of each row's tree.

    Life cycle, like a supplier's: `attach(target, supplier)` when the generator is built, `start(state)`
    after the target's prefill, per step `filter(tree, state)` then `commit(acceptance)`; `report()` at
    the end of a `generate` call goes to ``out.stats.filter``.
    """

    def attach(self, target: PreTrainedModel, supplier: Supplier) -> None:
        """Check that this filter can serve `target` and `supplier`; raise ValueError if not."""

    def start(self, state: DecodeState) -> None:
        """Prepare for a new batch of prompts (prefill a scorer's cache, reset counters)."""

    @abstractmethod
    def filter(self, tree: TreeBatch, state: DecodeState) -> TreeBatch:
        """The tree the target verifies: a subset of each row's `tree` (a `TreeBatch` of its own), the root
        kept."""

    def commit(self, acceptance: Acceptance) -> None:
        """Learn what the target accepted (advance a scorer's cache)."""

    def record_step(self, step: StepRecord) -> None:
        """What the loop measured in this step (after `commit`; not the first step, which reads the prompt)."""

    def report(self) -> FilterStats | None:
        """What this filter did since `start`."""
        return None


@dataclass(frozen=True)
class StepRecord:
    """What the generation loop measured in one step (numbers it has on the host anyway).

    width: nodes per row verified (the padded tree width); accepted: [rows] tokens emitted per active
    row, bonus included; propose .. commit: the loop's stage times in seconds; active: [B] bool, the rows
    `accepted` covers (None: all).
    """

    width: int
    accepted: np.ndarray
    propose: float
    filter: float
    verify: float
    commit: float
    active: np.ndarray | None = None

    @property
    def seconds(self) -> float:
        return self.propose + self.filter + self.verify + self.commit


@dataclass
class PlanStats:
    """A planner's report over the steps of one or more `generate` calls (sums, so parts merge).

    predicted/measured speedup: sum of c_T * tokens per row over the sum of step seconds, with the
    planner's c_T, its predictions (before each step) and the loop's measurements (after it). The first
    step of a call, which also reads the prompt, is not counted. In a batch the measured tokens are the
    batch's: a call ends with its slowest row, so its rows' mean tokens per step overstate its progress
    (`measured_tokens`: the mean over each step's active rows; `batch_tokens`: per call, the most tokens
    any row received, what AR needs as many steps for); the prediction includes the planner's spread.
    """

    steps_drafted: int = 0
    steps_ar: int = 0
    probes: int = 0
    predicted_tokens: float = 0.0
    measured_tokens: float = 0.0
    batch_tokens: float = 0.0
    ar_seconds_predicted: float = 0.0
    ar_seconds_measured: float = 0.0
    seconds_predicted: float = 0.0
    seconds_measured: float = 0.0

    def merge(self, other: "PlanStats") -> "PlanStats":
        return PlanStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    @property
    def predicted_speedup(self) -> float:
        return self.ar_seconds_predicted / self.seconds_predicted if self.seconds_predicted else 0.0

    @property
    def measured_speedup(self) -> float:
        """The planner's steps' tokens at its c_T over their measured seconds: a decode-phase figure (a call's
        prompt step, which plain decoding pays alike, and the loop's untimed work are not among them), so
        above the run's end-to-end speedup when drafting pays."""
        if not self.seconds_measured:
            return 0.0
        spread = self.batch_tokens / self.measured_tokens if self.batch_tokens and self.measured_tokens else 1.0
        return self.ar_seconds_measured * spread / self.seconds_measured

    def to_dict(self) -> dict:
        steps = self.steps_drafted + self.steps_ar
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "predicted_speedup": self.predicted_speedup, "measured_speedup": self.measured_speedup,
                "predicted_accepted_length": self.predicted_tokens / steps if steps else 0.0,
                "measured_accepted_length": self.measured_tokens / steps if steps else 0.0}


@dataclass
class FilterStats:
    """What a filter did to the trees of one or more `generate` calls; every field is a count over active
    row-steps, so parts add up (`merge`). Branches are root-to-leaf paths of the supplier's tree, nodes its
    non-root nodes. An *empty* tree is one the supplier proposed with candidates and the filter cut to the
    root; an *AR fallback* is any row-step verified as the root alone (supplier-empty or filter-emptied).
    `accepted` counts the candidates the target accepted (bonus tokens excluded), so `acceptance_rate` is
    the share of the retained candidates that were accepted. A row-step a gate left unscored keeps its
    whole tree (it counts as kept). Audit counts exist only when the filter also verified the unfiltered
    tree. The step counts (``steps`` .. ``width_verified``) are per step, not per row: the padded widths
    of the trees the filter got and sent on, summed, say how much verification width pruning saved."""

    rows: int = 0
    supplier_empty: int = 0
    filter_emptied: int = 0
    branches: int = 0
    branches_kept: int = 0
    nodes: int = 0
    nodes_kept: int = 0
    accepted: int = 0  # retained candidates the target accepted
    unscored: int = 0  # row-steps sent unfiltered because a gate skipped scoring
    audited: int = 0  # row-steps whose unfiltered tree was verified too
    false_discards: int = 0  # audited row-steps where a discarded branch would have been accepted further
    tokens_lost: int = 0  # accepted tokens the discards cost, summed over audited row-steps
    rule_discards: int = 0  # of the false discards, those the threshold rule made (before a gate's sizing)
    steps: int = 0  # steps the filter saw
    steps_unscored: int = 0  # of them, steps a gate sent unfiltered
    width_proposed: int = 0  # padded tree widths the supplier proposed, summed over steps
    width_verified: int = 0  # padded tree widths sent to the target, summed over steps

    def merge(self, other: "FilterStats") -> "FilterStats":
        return FilterStats(**{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)})

    def to_dict(self) -> dict:
        ratio = lambda a, b: a / b if b else 0.0  # noqa: E731
        with_candidates = self.rows - self.supplier_empty
        return {**{f.name: getattr(self, f.name) for f in fields(self)},
                "branch_keep_rate": ratio(self.branches_kept, self.branches),
                "node_keep_rate": ratio(self.nodes_kept, self.nodes),
                "empty_tree_rate": ratio(self.filter_emptied, with_candidates),
                "ar_fallback_rate": ratio(self.supplier_empty + self.filter_emptied, self.rows),
                "acceptance_rate": ratio(self.accepted, self.nodes_kept),
                "unscored_rate": ratio(self.unscored, self.rows),
                "steps_unscored_rate": ratio(self.steps_unscored, self.steps),
                "width_saved_rate": ratio(self.width_proposed - self.width_verified, self.width_proposed),
                "false_discard_rate": ratio(self.false_discards, self.audited),
                "rule_discard_rate": ratio(self.rule_discards, self.audited)}
