"""The generation loop: the same short loop for every method (docs/architecture.md)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

from .cache import TreeCache, free_memory
from .checks import is_int
from .sampling import Sampling, check_generator
from .stages import FilterStats, PlanStats, StepRecord, Supplier, TreeFilter
from .state import DecodeState
from .verify import PromptBlock, TreeVerifier

__all__ = ["SpeculativeGenerator", "GenerateOutput", "Stats", "TreeFilter", "FilterStats"]


@dataclass
class Stats:
    """What one `generate` call did. Stage times are host wall-clock (on a GPU, queued work is counted by
    the stage that waits for it, in practice `verify`, which holds the step's one sync). "prefill" is
    the setup and the suppliers' and filter's own prefills; the target reads the prompt in the first
    verification (one forward with the first tree), so that time is in "verify"."""

    steps: int = 0
    new_tokens: int = 0
    accepted_lengths: list[int] = field(default_factory=list)  # per active row and step: tokens emitted, bonus
    # included (a step that accepts past max_new_tokens or an EOS counts only what the row output)
    tree_sizes: list[int] = field(default_factory=list)  # nodes per row sent to the target (padded width T)
    stage_seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(
        ("prefill", "propose", "filter", "verify", "commit"), 0.0))
    step_seconds: list[float] = field(default_factory=list)  # per step, the four stages together
    seconds: float = 0.0
    filter: FilterStats | None = None  # the filter's report, when the generator has a filter
    plan: PlanStats | None = None  # the step planner's report (SMART; retrieval, prompt lookup with a cost model)

    @property
    def mean_accepted_length(self) -> float:
        """Mean tokens emitted per row per step, the bonus token included (Spec-Bench's convention)."""
        return float(np.mean(self.accepted_lengths)) if self.accepted_lengths else 0.0

    @property
    def mean_tree_size(self) -> float:
        return float(np.mean(self.tree_sizes)) if self.tree_sizes else 0.0

    @property
    def accepted_histogram(self) -> dict[int, int]:
        return dict(sorted(Counter(self.accepted_lengths).items()))

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def filter_share(self) -> float:
        """The filter stage's share of the steps' time (prefill excluded): for ValuSpec, what scoring costs."""
        steps = sum(v for k, v in self.stage_seconds.items() if k != "prefill")
        return self.stage_seconds["filter"] / steps if steps > 0 else 0.0

    def record(self, accepted: np.ndarray, tree_size: int, new_tokens: int, **stage_seconds: float) -> None:
        """One step: tokens emitted per active row (bonus included), nodes per row sent, tokens kept."""
        self.steps += 1
        self.accepted_lengths += accepted.tolist()
        self.tree_sizes += [tree_size] * len(accepted)
        self.new_tokens += new_tokens
        self.step_seconds.append(sum(stage_seconds.values()))
        for name, seconds in stage_seconds.items():
            self.stage_seconds[name] += seconds

    @classmethod
    def merge(cls, parts: list["Stats"]) -> "Stats":
        """The stats of several `generate` calls as one (times and counts add up, per-step lists join)."""
        total = cls()
        for s in parts:
            total.steps += s.steps
            total.new_tokens += s.new_tokens
            total.accepted_lengths += s.accepted_lengths
            total.tree_sizes += s.tree_sizes
            total.step_seconds += s.step_seconds
            total.seconds += s.seconds
            for name, seconds in s.stage_seconds.items():
                total.stage_seconds[name] += seconds
            if s.filter is not None:
                total.filter = s.filter if total.filter is None else total.filter.merge(s.filter)
            if s.plan is not None:
                total.plan = s.plan if total.plan is None else total.plan.merge(s.plan)
        return total

    def to_dict(self) -> dict:
        return {"steps": self.steps, "new_tokens": self.new_tokens, "mean_accepted_length": self.mean_accepted_length,
                "mean_tree_size": self.mean_tree_size, "accepted_histogram": self.accepted_histogram,
                "stage_seconds": dict(self.stage_seconds), "seconds": self.seconds,
                "tokens_per_second": self.tokens_per_second,
                **({"filter": {**self.filter.to_dict(), "filter_share": self.filter_share}}
                   if self.filter is not None else {}),
                **({"plan": self.plan.to_dict()} if self.plan is not None else {})}


@dataclass(frozen=True)
class GenerateOutput:
    sequences: Tensor  # [B, P + L]: the layout of target.generate(..., do_sample=False)
    stats: Stats


class SpeculativeGenerator:
    """Speculative decoding: `supplier` proposes trees, `filter` (optional) prunes them, the target
    verifies them. Greedy (temperature 0): output identical to ``target.generate(do_sample=False)``;
    temperature > 0: lossless tree rejection sampling, the target's own sampling distribution."""

    def __init__(self, target: PreTrainedModel, supplier: Supplier, filter: TreeFilter | None = None, *,
                 backend: str = "auto", validate_trees: bool = False):
        if not isinstance(supplier, Supplier):
            raise TypeError(f"supplier: expected a specdec Supplier, got {type(supplier).__name__}")
        if filter is not None and not isinstance(filter, TreeFilter):
            raise TypeError(f"filter: expected a specdec TreeFilter, got {type(filter).__name__}")
        self.verifier = TreeVerifier(target, backend=backend)
        self.target = target
        self.supplier = supplier
        self.filter = filter
        self.validate_trees = validate_trees  # check every proposed tree (one sync per step more)
        supplier.attach(target)
        self.verifier.request_features(supplier.feature_layers())  # EAGLE heads read the target's hidden states
        if filter is not None:
            filter.attach(target, supplier)

    def generate(self, input_ids: Tensor, attention_mask: Tensor | None = None, max_new_tokens: int = 128,
                 eos_token_id: int | list[int] | None = None, pad_token_id: int | None = None, *,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None) -> GenerateOutput:
        """temperature 0 is greedy; else sample with transformers' warpers (top_k, top_p), drawing from
        `generator` (a torch.Generator on the target's device; None: torch's default generator).

        Masked (padding) positions of `input_ids` may hold any value (-100 included): they are never read,
        and are returned as given. Every argument is checked, and the caches and trees this call needs
        are estimated against the device's free memory, before anything is allocated.
        """
        t_begin = time.perf_counter()
        sampling = Sampling(temperature, top_k, top_p)
        check_generator(generator, self.target.device)
        ids, start, eos, pad = self._check(input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id)
        max_new_tokens = int(max_new_tokens)
        capacity = input_ids.shape[1] + 2 * (max_new_tokens + self.supplier.max_tree_size())
        self._check_memory(input_ids.shape[0], capacity)
        state = DecodeState.begin(ids, start, max_new_tokens=max_new_tokens, capacity=capacity,
                                  eos_token_ids=eos, pad_token_id=pad, sampling=sampling, generator=generator)
        stats = Stats()
        cache = self.verifier.new_cache(input_ids.shape[0], capacity)
        prompt = PromptBlock(ids[:, :-1], start)  # forwarded with the first tree: no separate prefill
        self.supplier.start(state)
        if self.filter is not None:
            self.filter.start(state)
        stats.stage_seconds["prefill"] += time.perf_counter() - t_begin
        while not state.done:
            t0 = time.perf_counter()
            tree = self.supplier.propose(state)
            t1 = time.perf_counter()
            if self.filter is not None:
                tree = self.filter.filter(tree, state)
            active = ~state.finished
            if state.finished.any():  # finished rows: root only
                tree = tree.with_num_nodes(torch.where(state.active(), tree.num_nodes, 1))
            t2 = time.perf_counter()
            acc = self.verifier.verify(tree, cache, validate=self.validate_trees, prompt=prompt, sampling=sampling,
                                       generator=generator)
            t3 = time.perf_counter()
            self.supplier.commit(acc)
            if self.filter is not None:
                self.filter.commit(acc)
            emitted = state.append(acc)
            t4 = time.perf_counter()
            accepted = acc.host_num_accepted[active] + 1  # what the target accepted (the planner learns from it)
            # the stats count what each row emitted: a last step's tokens past max_new_tokens or an EOS are not output
            stats.record(emitted[active], tree.size, int(emitted.sum()), propose=t1 - t0, filter=t2 - t1,
                         verify=t3 - t2, commit=t4 - t3)
            if prompt is None:  # the first verification also forwarded the prompt: not a step's cost
                record = StepRecord(tree.size, accepted, t1 - t0, t2 - t1, t3 - t2, t4 - t3, active)
                self.supplier.record_step(record)
                if self.filter is not None:
                    self.filter.record_step(record)
            prompt = None
        stats.seconds = time.perf_counter() - t_begin
        stats.filter = self.filter.report() if self.filter is not None else None
        stats.plan = self.supplier.report()
        sequences = state.sequences()
        sequences[:, : input_ids.shape[1]] = input_ids  # the caller's padding values, as generate() returns them
        return GenerateOutput(sequences, stats)

    def _check(self, input_ids: Tensor, attention_mask: Tensor | None, max_new_tokens: int,
               eos_token_id: int | list[int] | None,
               pad_token_id: int | None) -> tuple[Tensor, Tensor, list[int], int]:
        """Validate the arguments (before any state changes); returns (input_ids with every masked position
        holding the pad id [B, P], start [B], eos ids, pad id)."""
        if not isinstance(input_ids, Tensor) or input_ids.ndim != 2 or input_ids.shape[1] < 1 or input_ids.shape[0] < 1:
            raise ValueError(f"input_ids: expected a [B, P] tensor with B, P >= 1, got "
                             f"{tuple(input_ids.shape) if isinstance(input_ids, Tensor) else type(input_ids).__name__}")
        if input_ids.dtype != torch.int64:
            raise TypeError(f"input_ids: expected int64, got {input_ids.dtype}")
        if input_ids.device != self.target.device:
            raise ValueError(f"input_ids: on {input_ids.device}, the target on {self.target.device}")
        if not is_int(max_new_tokens) or max_new_tokens <= 0:
            raise ValueError(f"max_new_tokens: expected an int > 0, got {max_new_tokens!r}")
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        if not isinstance(attention_mask, Tensor):
            raise TypeError(f"attention_mask: expected a torch.Tensor or None, got {type(attention_mask).__name__}")
        if attention_mask.shape != input_ids.shape or attention_mask.device != input_ids.device:
            raise ValueError(f"attention_mask: expected {tuple(input_ids.shape)} on {input_ids.device}, "
                             f"got {tuple(attention_mask.shape)} on {attention_mask.device}")
        mask = attention_mask != 0
        start = (~mask).to(torch.int64).sum(1)
        left_padded = mask.cumsum(1) == (torch.arange(input_ids.shape[1], device=mask.device)[None] - start[:, None] + 1).clamp(min=0)
        if not bool(left_padded.all()) or not bool(mask[:, -1].all()):
            row = int((~left_padded.all(1) | ~mask[:, -1]).nonzero()[0, 0])
            raise ValueError(f"attention_mask: row {row} is not left-padded (zeros, then ones, at least one)")
        vocab = self.verifier.vocab_size
        if bool(((input_ids < 0) | (input_ids >= vocab))[mask].any()):
            raise ValueError(f"input_ids: token ids outside the target's vocabulary [0, {vocab})")
        config = self.target.config.get_text_config()
        longest = int((input_ids.shape[1] - start).max())
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and longest + max_new_tokens > limit:
            raise ValueError(f"max_new_tokens: a {longest}-token prompt plus {max_new_tokens} new tokens exceeds the "
                             f"model's {limit} positions")
        window = getattr(config, "sliding_window", None)
        if window is not None and getattr(config, "use_sliding_window", True) is not False:
            if input_ids.shape[1] + 2 * (max_new_tokens + self.supplier.max_tree_size()) > window:
                raise ValueError(f"max_new_tokens: the sequence could outgrow the model's sliding window of {window} "
                                 "tokens, which tree attention does not implement")
        eos, pad = self._special_ids(eos_token_id, pad_token_id, vocab)
        return torch.where(mask, input_ids, pad), start, eos, pad

    def _special_ids(self, eos_token_id: object, pad_token_id: object, vocab: int) -> tuple[list[int], int]:
        """The EOS ids (a list) and the pad id, from the arguments or the target's generation config."""
        gen = self.target.generation_config
        given = eos_token_id is not None
        eos = gen.eos_token_id if eos_token_id is None else eos_token_id
        eos = eos.tolist() if isinstance(eos, Tensor) else eos
        eos = [] if eos is None else ([eos] if is_int(eos) else eos)
        if not isinstance(eos, (list, tuple)) or not all(is_int(e) and e >= 0 for e in eos):
            source = "" if given else " (from the target's generation_config)"
            raise ValueError(f"eos_token_id: expected None, a token id >= 0 or a list of them, got "
                             f"{eos_token_id if given else gen.eos_token_id!r}{source}")
        eos = [int(e) for e in eos]
        source = ""
        if pad_token_id is None:
            pad_token_id = gen.pad_token_id if gen.pad_token_id is not None else (eos[0] if eos else 0)
            source = " (from the target's generation_config or its EOS id)"
        if not is_int(pad_token_id) or not 0 <= pad_token_id < vocab:
            raise ValueError(f"pad_token_id: expected a token id in [0, {vocab}), got {pad_token_id!r}{source}")
        return eos, int(pad_token_id)

    def _check_memory(self, batch_size: int, capacity: int) -> None:
        """ValueError naming the argument that drives most of it when the caches and tree buffers of this
        call (target cache, the supplier's `memory_bytes`) exceed the device's free memory."""
        parts = {"max_new_tokens": batch_size * capacity * TreeCache.slot_bytes(self.target)}
        for name, size in self.supplier.memory_bytes(batch_size, capacity).items():
            parts[name] = parts.get(name, 0) + size
        need, free = sum(parts.values()), free_memory(self.target.device)
        if free is None or need <= free:
            return
        name = max(parts, key=parts.get)
        detail = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1]))
        raise ValueError(f"{name}: a batch of {batch_size} needs about {need / 2**30:.1f} GiB of caches and tree "
                         f"buffers (GiB by argument: {detail}), more than the {free / 2**30:.1f} GiB free on "
                         f"{self.target.device}; lower {name} or the batch size")
