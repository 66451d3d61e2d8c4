"""Device profiling for SMART's step cost model: `profile(target, draft) -> Profile` (see `specdec.cost`).

A step of speculative decoding pays, besides the target's verification forward, the draft's catch-up
forward, one draft forward per tree layer and the loop's own work. `profile` measures each part at every
batch size, on real caches (`TreeCache` filled to the context length) and real code paths:

- verify:    the target's tree forward of n nodes per row (random valid trees), at ``context_len`` and, for
             a few sizes, at a short context (how the cost moves with the context);
- draft:     the draft's forward of n nodes per row (one tree layer n wide);
- catch-up:  the draft's catch-up of a backlog of m committed tokens per row (a chain forward and its
             commit), m = 1 ... 64;
- AR step:   c_T, a plain decoding step through `SpeculativeGenerator` (loop included), not a bare forward;
             checked against the one-node verification it contains (`AR_BAND`).

Each point is the median of ``repeats`` timed calls after one warm-up. The profile checks itself: a point
whose repeats spread more than `MAX_SPREAD` (interquartile range over median) or that reads cheaper than a
smaller size by more than `MONOTONE_SLACK` is measured again (up to `RETRIES` times); what stays out of
line is written to ``notes`` (a profile taken while another process used the CPU read 64 nodes cheaper
than 32). The `Profile` is JSON keyed by device, dtype, batch sizes, context length and models.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from transformers import PreTrainedModel

from .checks import is_int
from .records import (atomic_write_text, cache_file, check_version, content_key, device_name, finite_list,
                      increasing_ints, model_name, read_json, require_fields, versions)

if TYPE_CHECKING:
    from .cache import TreeCache
    from .eagle import EagleHead

__all__ = ["Profile", "profile", "cached_profile", "DEFAULT_SIZES", "DEFAULT_BATCH_SIZES", "BACKLOGS", "FORMAT_VERSION",
           "FORMAT_HISTORY"]

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_BATCH_SIZES = (1, 4, 8, 16)
BACKLOGS = (1, 2, 4, 8, 16, 32, 64)  # catch-up lengths m
FORMAT_VERSION = 2  # of profile and cost-model files
FORMAT_HISTORY = (" (the step cost model: version 1 held forward times only, without the AR step, the catch-up and "
                  "the context timings)")
MAX_SPREAD = 0.25
MONOTONE_SLACK = 0.05
RETRIES = 2
AR_STEPS = 8  # timed plain-decoding steps per repeat
AR_BAND = (0.67, 1.5)  # an AR step over the one-node verification, outside which it is measured again


def _eagle_head(draft: object) -> "EagleHead | None":
    """`draft` when it is an EAGLE head (profiled by `specdec.eagle_profiling`), else None."""
    from .eagle import EagleHead

    return draft if isinstance(draft, EagleHead) else None


# ---------------------------------------------------------------------------------------------- the record
@dataclass(frozen=True)
class Profile:
    """Median times of the parts of a step, per batch size (rows: ``batch_sizes``), in seconds.

    verify_seconds[b][i]:  the target's tree forward, sizes[i] nodes per row, over context_len tokens.
    context_seconds[b][i]: the same at short_context tokens for context_sizes[i] (how verify moves with
                           the context).
    draft_seconds[b][i]:   the draft's forward of sizes[i] nodes per row (a tree layer that wide); None
                           without a draft, like catch_up_seconds.
    catch_up_seconds[b][j]: the draft's catch-up of backlogs[j] committed tokens per row.
    ar_step_seconds[b]:    c_T, a plain decoding step through `SpeculativeGenerator` at context_len.
    spread: (q75 - q25) / median of each point's repeats, by table; notes: what the self-check re-measured
    and what stayed out of line.
    """

    device: str
    dtype: str
    target: str
    draft: str | None
    context_len: int
    batch_sizes: tuple[int, ...]
    sizes: tuple[int, ...]
    repeats: int
    verify_seconds: tuple[tuple[float, ...], ...]
    short_context: int
    context_sizes: tuple[int, ...]
    context_seconds: tuple[tuple[float, ...], ...]
    ar_step_seconds: tuple[float, ...]
    draft_seconds: tuple[tuple[float, ...], ...] | None = None
    backlogs: tuple[int, ...] = BACKLOGS
    catch_up_seconds: tuple[tuple[float, ...], ...] | None = None
    spread: dict[str, list[list[float]]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    versions: dict[str, str | None] = field(default_factory=dict)
    created: str = ""

    FORMAT = "specdec-profile"

    def save(self, path: str | Path) -> None:
        doc = {"format": self.FORMAT, "version": FORMAT_VERSION, **asdict(self)}
        atomic_write_text(path, json.dumps(doc, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile: an older format, missing fields, NaN or non-positive times, ragged
        tables -> ValueError naming what is wrong."""
        doc = read_json(path, "profile", cls.FORMAT)
        check_version(doc, f"profile {path}", FORMAT_VERSION, "profile again (specdec profile)", FORMAT_HISTORY)
        return cls.from_dict(doc, f"profile {path}")

    @classmethod
    def from_dict(cls, doc: dict, what: str = "profile") -> "Profile":
        require_fields(doc, ("device", "dtype", "target", "draft", "context_len", "batch_sizes", "sizes", "repeats",
                             "verify_seconds", "short_context", "context_sizes", "context_seconds", "ar_step_seconds",
                             "draft_seconds", "backlogs", "catch_up_seconds"), what)
        sizes = increasing_ints(doc["sizes"], f"{what}: sizes", 3)
        batch_sizes = increasing_ints(doc["batch_sizes"], f"{what}: batch_sizes")
        context_sizes = increasing_ints(doc["context_sizes"], f"{what}: context_sizes")
        backlogs = increasing_ints(doc["backlogs"], f"{what}: backlogs", 2)
        for name in ("device", "dtype", "target"):
            if not isinstance(doc[name], str):
                raise ValueError(f"{what}: {name} must be a string, got {doc[name]!r:.80}")
        if doc["draft"] is not None and not isinstance(doc["draft"], str):
            raise ValueError(f"{what}: draft must be a string or null, got {doc['draft']!r:.80}")
        for name in ("context_len", "short_context", "repeats"):
            if not is_int(doc[name]) or doc[name] < 1:
                raise ValueError(f"{what}: {name} must be a positive int, got {doc[name]!r:.80}")
        if doc["short_context"] >= doc["context_len"]:
            raise ValueError(f"{what}: short_context {doc['short_context']} must be below context_len {doc['context_len']}")
        for name in ("spread", "versions"):
            if not isinstance(doc.get(name) or {}, dict):
                raise ValueError(f"{what}: {name} must be an object, got {doc[name]!r:.80}")
        tables = {}
        for name, columns, optional in (("verify_seconds", sizes, False), ("context_seconds", context_sizes, False),
                                        ("draft_seconds", sizes, True), ("catch_up_seconds", backlogs, True)):
            rows = doc[name]
            if rows is None and optional:
                tables[name] = None
                continue
            if not isinstance(rows, (list, tuple)) or len(rows) != len(batch_sizes):
                raise ValueError(f"{what}: {name} needs one row per batch size ({len(batch_sizes)})")
            tables[name] = tuple(tuple(finite_list(r, f"{what}: {name}", len(columns))) for r in rows)
        if (tables["draft_seconds"] is None) != (tables["catch_up_seconds"] is None):
            raise ValueError(f"{what}: draft_seconds and catch_up_seconds must both be present or both null")
        ar_step = tuple(finite_list(doc["ar_step_seconds"], f"{what}: ar_step_seconds", len(batch_sizes)))
        return cls(device=str(doc["device"]), dtype=str(doc["dtype"]), target=str(doc["target"]),
                   draft=None if doc["draft"] is None else str(doc["draft"]), context_len=doc["context_len"],
                   batch_sizes=batch_sizes, sizes=sizes, repeats=doc["repeats"],
                   verify_seconds=tables["verify_seconds"], short_context=doc["short_context"],
                   context_sizes=context_sizes, context_seconds=tables["context_seconds"], ar_step_seconds=ar_step,
                   draft_seconds=tables["draft_seconds"], backlogs=backlogs, catch_up_seconds=tables["catch_up_seconds"],
                   spread=doc.get("spread") or {}, notes=tuple(doc.get("notes") or ()),
                   versions=doc.get("versions") or {}, created=doc.get("created", ""))


# ---------------------------------------------------------------------------------------------- measuring
def _filled_cache(model: PreTrainedModel, batch_size: int, context_len: int, extra: int) -> "TreeCache":
    """A TreeCache holding context_len committed tokens per row (random K/V: the values do not change cost)."""
    from .cache import TreeCache

    cache = TreeCache.for_model(model, batch_size, context_len + extra)
    for layer in cache.layers:
        layer.keys.normal_()
        layer.values.normal_()
    cache.commit_prefix(torch.full((batch_size,), context_len, dtype=torch.int64, device=cache.device),
                        [context_len] * batch_size)
    return cache


def _timed(fn: Callable[[], None], repeats: int, device: torch.device) -> list[float]:
    """Seconds per call of fn: CUDA events on a GPU (device time), perf_counter on the CPU."""
    out = []
    for _ in range(repeats):
        if device.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            out.append(begin.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
    return out


def _spread(t: np.ndarray) -> float:
    q25, med, q75 = np.percentile(t, [25, 50, 75])
    return float((q75 - q25) / med)


def _checked_series(steps: list[Callable[[], None]], repeats: int, device: torch.device, what: str,
                    notes: list[str]) -> tuple[list[float], list[float]]:
    """Median seconds and spread of each step (one per increasing size), with the self-check: points that
    spread more than MAX_SPREAD or read cheaper than a smaller size are measured again (their repeats
    pooled with the first ones), up to RETRIES rounds; what stays out of line goes to `notes`."""
    samples = []
    for step in steps:
        _timed(step, 1, device)  # warm-up: allocator, kernel selection, Triton compilation
        samples.append(np.array(_timed(step, repeats, device)))
    for _ in range(RETRIES):
        med = [float(np.median(s)) for s in samples]
        bad = {i for i, s in enumerate(samples) if _spread(s) > MAX_SPREAD}
        for i in range(1, len(med)):
            if med[i] < med[i - 1] * (1 - MONOTONE_SLACK):
                bad |= {i - 1, i}
        if not bad:
            break
        for i in sorted(bad):
            samples[i] = np.concatenate([samples[i], _timed(steps[i], repeats, device)])
    med = [float(np.median(s)) for s in samples]
    spread = [_spread(s) for s in samples]
    wide = [i for i, s in enumerate(spread) if s > MAX_SPREAD]
    falls = [i for i in range(1, len(med)) if med[i] < med[i - 1] * (1 - MONOTONE_SLACK)]
    if wide or falls:
        notes.append(f"{what}: after {RETRIES} re-measurements, points {wide} still spread over {MAX_SPREAD:.0%} and "
                     f"points {falls} read cheaper than the size before them (the cost model makes them monotone)")
    return med, spread


def _tree_steps(model: PreTrainedModel, cache: "TreeCache", sizes: tuple[int, ...], backend: str,
                gen: torch.Generator) -> list[Callable[[], None]]:
    """One callable per size: a tree forward of n random nodes per row over `cache`, rolled back."""
    from .attention import tree_forward
    from .eagle_profiling import random_tree
    from .verify import vocab_size

    steps = []
    for n in sizes:
        tree = random_tree(cache.batch_size, n, gen, vocab_size(model), model.device)
        mask, pos = tree.ancestor_mask, tree.positions(cache.positions())

        def step(tree=tree, mask=mask, pos=pos):
            tree_forward(model, cache, tree.tokens, pos, mask, backend=backend)
            cache.rollback()

        steps.append(step)
    return steps


def _catch_up_steps(draft: PreTrainedModel, cache: "TreeCache", backlogs: tuple[int, ...], backend: str,
                    gen: torch.Generator) -> list[Callable[[], None]]:
    """One callable per backlog m: what `DraftRunner.catch_up` does for m tokens per row (a chain forward,
    its commit, the logits at the root), then the commit undone so the cache stays at its context."""
    from .attention import tree_forward
    from .tree import TreeBatch
    from .verify import vocab_size

    B = cache.batch_size
    steps = []
    for m in backlogs:
        tokens = torch.randint(0, vocab_size(draft), (B, m), generator=gen).to(cache.device)
        count = torch.full((B,), m, dtype=torch.int64, device=cache.device)

        def step(tokens=tokens, count=count, m=m):
            chain = TreeBatch.chain(tokens, count)
            logits = tree_forward(draft, cache, chain.tokens, chain.positions(cache.positions()), chain.ancestor_mask,
                                  backend=backend)
            cache.commit_prefix(count, np.full(B, m))
            logits.gather(1, (count - 1)[:, None, None].expand(-1, 1, logits.shape[-1]))
            cache.length -= count  # undo the commit: the next call starts from the same context
            cache.host_length -= m

        steps.append(step)
    return steps


def _ar_step_samples(target: PreTrainedModel, batch_size: int, context_len: int, repeats: int, backend: str,
                     gen: torch.Generator) -> np.ndarray:
    """Seconds of AR_STEPS * repeats plain decoding steps through `SpeculativeGenerator` (ARSupplier) over
    random prompts of context_len tokens; the first step, which also reads the prompt, is not counted."""
    from .generate import SpeculativeGenerator
    from .suppliers.base import ARSupplier
    from .verify import vocab_size

    loop = SpeculativeGenerator(target, ARSupplier(), backend=backend)
    ids = torch.randint(0, vocab_size(target), (batch_size, context_len), generator=gen).to(target.device)
    loop.generate(ids, max_new_tokens=2, eos_token_id=[], pad_token_id=0)  # warm-up
    out = loop.generate(ids, max_new_tokens=1 + AR_STEPS * repeats, eos_token_id=[], pad_token_id=0)
    return np.array(out.stats.step_seconds[1:])


def _ar_step_seconds(target: PreTrainedModel, batch_size: int, context_len: int, repeats: int, backend: str,
                     gen: torch.Generator, one_node: float, what: str, notes: list[str]) -> tuple[float, float]:
    """Median and spread of a plain decoding step (`_ar_step_samples`), with the self-check: a round of steps
    that spreads more than MAX_SPREAD, or a pooled median outside AR_BAND times the one-node verification
    `one_node` (an AR step is that forward plus the loop's work: 0.9-1.4x in fifteen cached profiles of the
    2-core CPU, 5.8-6.2x in one taken while the machine stalled), is measured again (pooled), up to RETRIES
    rounds; what stays out goes to `notes`."""
    last = t = _ar_step_samples(target, batch_size, context_len, repeats, backend, gen)
    low, high = AR_BAND

    def off() -> bool:  # the spread of the latest round (pooled, a stalled round and a quiet one read bimodal)
        return _spread(last) > MAX_SPREAD or not low <= float(np.median(t)) / one_node <= high

    for _ in range(RETRIES):
        if not off():
            break
        last = _ar_step_samples(target, batch_size, context_len, repeats, backend, gen)
        t = np.concatenate([t, last])
    if off():
        notes.append(f"{what}: after {RETRIES} re-measurements, the median step ({np.median(t) * 1e3:.2f} ms) is "
                     f"{np.median(t) / one_node:.2f}x the one-node verification (expected {low}-{high}x), the last "
                     f"round's spread {_spread(last):.0%} (limit {MAX_SPREAD:.0%}); the planner measures c_T online")
    return float(np.median(t)), _spread(t)


def profile(target: PreTrainedModel, draft: "PreTrainedModel | EagleHead | None" = None, *,
            batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES, context_len: int = 512,
            sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 5, backend: str = "auto",
            progress: bool = True) -> Profile:
    """Time the parts of a step on this device (module docstring): the target's tree forward at each size
    (and a few at a short context), the draft's layer forward and catch-up, and c_T through the loop.
    `draft` may be an EAGLE head (`EagleHead`): its layer and catch-up are then the head's forwards.

    Sizes must resolve the knee where verification turns compute-bound (the default doubles from 1 to
    256). A few seconds to minutes: the time is mostly the largest trees at the largest batch.
    """
    from tqdm import tqdm

    from .attention import install
    from .eagle_profiling import head_cache, head_catch_up_steps, head_layer_steps

    batch_sizes, sizes = tuple(batch_sizes), tuple(sizes)
    for name, values in (("batch_sizes", batch_sizes), ("sizes", sizes)):
        if not values or any(not is_int(v) or v < 1 for v in values) or list(values) != sorted(set(values)):
            raise ValueError(f"{name}: expected increasing positive ints, got {values!r}")
    if len(sizes) < 3:
        raise ValueError(f"sizes: the fit needs at least 3 tree sizes, got {sizes!r}")
    if not is_int(repeats) or repeats < 1:
        raise ValueError(f"repeats: expected an int >= 1, got {repeats!r}")
    limit = target.config.get_text_config().max_position_embeddings
    need = max(max(sizes), max(BACKLOGS), 1 + AR_STEPS * repeats)
    if not is_int(context_len) or context_len < 4 or context_len + need > limit:
        raise ValueError(f"context_len: expected an int >= 4 with context_len + {need} <= the model's {limit} "
                         f"positions, got {context_len!r}")
    head = _eagle_head(draft)
    draft_device = None if draft is None else head.fc.weight.device if head is not None else draft.device
    if draft is not None and draft_device != target.device:
        raise ValueError(f"draft: on {draft_device}, the target on {target.device}")
    for model in (target, draft):
        if model is not None and model is not head:
            install(model)
    short = max(2, context_len // 4)
    context_sizes = tuple(dict.fromkeys((sizes[0], sizes[len(sizes) // 2])))
    gen = torch.Generator().manual_seed(0)
    tables: dict[str, list] = {k: [] for k in ("verify", "context", "draft", "catch_up", "ar")}
    spread: dict[str, list] = {k: [] for k in tables}
    notes: list[str] = []
    parts = 3 + (2 if draft is not None else 0)
    device = target.device
    with torch.inference_mode(), tqdm(total=len(batch_sizes) * parts, desc="profile", unit="part",
                                      disable=not progress) as bar:
        for b in batch_sizes:
            jobs = [("verify", target, context_len, sizes, _tree_steps), ("context", target, short, context_sizes,
                                                                          _tree_steps)]
            if head is not None:
                jobs += [("draft", head, context_len, sizes, head_layer_steps),
                         ("catch_up", head, context_len, BACKLOGS, head_catch_up_steps)]
            elif draft is not None:
                jobs += [("draft", draft, context_len, sizes, _tree_steps),
                         ("catch_up", draft, context_len, BACKLOGS, _catch_up_steps)]
            for name, model, ctx, columns, make in jobs:
                cache = (head_cache(head, b, ctx, max(columns)) if model is head
                         else _filled_cache(model, b, ctx, max(columns)))
                med, spr = _checked_series(make(model, cache, columns, backend, gen), repeats, device,
                                           f"{name} at batch {b}", notes)
                tables[name].append(tuple(med))
                spread[name].append(spr)
                bar.update(1)
            one_node = float(np.interp(1.0, sizes, tables["verify"][-1]))
            step, spr = _ar_step_seconds(target, b, context_len, repeats, backend, gen, one_node,
                                         f"ar_step at batch {b}", notes)
            tables["ar"].append(step)
            spread["ar"].append([spr])
            bar.update(1)
    has_draft = draft is not None
    return Profile(device=device_name(device), dtype=str(target.dtype).removeprefix("torch."),
                   target=model_name(target), draft=model_name(draft), context_len=context_len,
                   batch_sizes=batch_sizes, sizes=sizes, repeats=repeats, verify_seconds=tuple(tables["verify"]),
                   short_context=short, context_sizes=context_sizes, context_seconds=tuple(tables["context"]),
                   ar_step_seconds=tuple(tables["ar"]), draft_seconds=tuple(tables["draft"]) if has_draft else None,
                   backlogs=BACKLOGS, catch_up_seconds=tuple(tables["catch_up"]) if has_draft else None,
                   spread={k: v for k, v in spread.items() if v}, notes=tuple(notes), versions=versions(),
                   created=time.strftime("%Y-%m-%dT%H:%M:%S"))


def cached_profile(target: PreTrainedModel, draft: "PreTrainedModel | EagleHead | None" = None, *, progress: bool = True,
                   **settings) -> Profile:
    """`profile(target, draft, **settings)`, run once per device, dtype, models' weights, package source, file
    format and settings (`records.content_key`) and kept as JSON under $SPECDEC_CACHE/profiles (default
    ~/.cache/specdec/profiles). A cached file that no longer validates (damaged, or written in an older
    format) is measured again."""
    key = content_key("profile", {"target": target, "draft": draft}, device=device_name(target.device),
                      dtype=str(target.dtype), settings={"format": FORMAT_VERSION, **settings})
    path = cache_file("profiles", "profile", key)
    if path.is_file():
        try:
            return Profile.load(path)
        except ValueError:
            pass  # a damaged or outdated cache file: profile again and overwrite it
    prof = profile(target, draft, progress=progress, **settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    return prof
