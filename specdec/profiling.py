"""Device profiling for SMART's cost model: `profile(target, draft) -> Profile` (see `specdec.cost`).

Times real tree forwards (a `TreeCache` filled to the context length, random valid trees) at each batch
size and tree size; the `Profile` is JSON keyed by device, dtype, batch sizes, context length and models.
"""

from __future__ import annotations

import json
import math
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import torch
from transformers import PreTrainedModel

from .checks import is_int

if TYPE_CHECKING:
    from .cache import TreeCache
    from .tree import TreeBatch

__all__ = ["Profile", "profile", "cached_profile", "device_name", "model_name", "DEFAULT_SIZES", "DEFAULT_BATCH_SIZES"]

DEFAULT_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
DEFAULT_BATCH_SIZES = (1, 4, 8, 16)


def device_name(device: torch.device) -> str:
    """A stable name for the timing device: the GPU's name, or the CPU's model and thread count."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    model = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass  # no /proc/cpuinfo (not Linux): the generic name stays
    return f"cpu {model} ({torch.get_num_threads()} threads)"


def model_name(model: PreTrainedModel | None) -> str | None:
    """The checkpoint a model was loaded from ("" for models built from a config)."""
    return None if model is None else str(getattr(model.config, "_name_or_path", "") or "")


def _versions() -> dict[str, str | None]:
    import transformers

    from . import __version__

    out = {"specdec": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def finite_list(values: object, name: str, length: int) -> list[float]:
    if not isinstance(values, (list, tuple)) or len(values) != length:
        raise ValueError(f"{name}: expected a list of {length} numbers, got {values!r:.80}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in values):
        raise ValueError(f"{name}: expected finite positive numbers, got {values!r:.80}")
    return [float(v) for v in values]


def positive_ints(values: object, name: str) -> list[int]:
    """A JSON list of ints >= 1; ValueError naming `name` otherwise."""
    if not isinstance(values, (list, tuple)) or not values or not all(is_int(v) and v >= 1 for v in values):
        raise ValueError(f"{name}: expected a non-empty list of positive ints, got {values!r:.80}")
    return [int(v) for v in values]


def require_fields(doc: dict, keys: tuple[str, ...], what: str) -> None:
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ValueError(f"{what}: missing field(s) {missing}")


def read_json(path: str | Path, what: str, kind: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ValueError(f"{what}: no file at {path}") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{what}: {path} is not JSON ({err})") from err
    if not isinstance(doc, dict) or doc.get("format") != kind:
        raise ValueError(f"{what}: {path} is not a {kind} file (its 'format' field is missing or different)")
    return doc


# ---------------------------------------------------------------------------------------------- profiling
@dataclass(frozen=True)
class Profile:
    """Median forward times of the target (a tree of n nodes) and the draft (one layer n wide).

    verify_seconds[b][i]: target time at batch size batch_sizes[b] and tree size sizes[i], every row
    holding a tree of sizes[i] nodes over a cache of context_len tokens. draft_seconds likewise (None
    without a draft). spread: (q75 - q25) / median of the same repeats, per entry, for the record.
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
    draft_seconds: tuple[tuple[float, ...], ...] | None
    spread: dict[str, list[list[float]]] = field(default_factory=dict)
    versions: dict[str, str | None] = field(default_factory=dict)
    created: str = ""

    FORMAT = "specdec-profile"

    def save(self, path: str | Path) -> None:
        from .records import atomic_write_text

        doc = {"format": self.FORMAT, "version": 1, **asdict(self)}
        atomic_write_text(path, json.dumps(doc, indent=1))

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile: missing fields, NaN or non-positive times, ragged tables -> ValueError."""
        doc = read_json(path, "profile", cls.FORMAT)
        return cls.from_dict(doc, f"profile {path}")

    @classmethod
    def from_dict(cls, doc: dict, what: str = "profile") -> "Profile":
        require_fields(doc, ("device", "dtype", "target", "draft", "context_len", "batch_sizes", "sizes", "repeats",
                       "verify_seconds", "draft_seconds"), what)
        sizes, batch_sizes = (positive_ints(doc[name], f"{what}: {name}") for name in ("sizes", "batch_sizes"))
        for name in ("device", "dtype", "target"):
            if not isinstance(doc[name], str):
                raise ValueError(f"{what}: {name} must be a string, got {doc[name]!r:.80}")
        if doc["draft"] is not None and not isinstance(doc["draft"], str):
            raise ValueError(f"{what}: draft must be a string or null, got {doc['draft']!r:.80}")
        if not is_int(doc["repeats"]) or doc["repeats"] < 1:
            raise ValueError(f"{what}: repeats must be a positive int, got {doc['repeats']!r:.80}")
        for name in ("spread", "versions"):
            if not isinstance(doc.get(name) or {}, dict):
                raise ValueError(f"{what}: {name} must be an object, got {doc[name]!r:.80}")
        if sizes != sorted(set(sizes)) or len(sizes) < 3:
            raise ValueError(f"{what}: sizes must be at least 3 increasing tree sizes, got {sizes}")
        if batch_sizes != sorted(set(batch_sizes)):
            raise ValueError(f"{what}: batch_sizes must be increasing, got {batch_sizes}")
        tables = {}
        for name in ("verify_seconds", "draft_seconds"):
            rows = doc[name]
            if rows is None and name == "draft_seconds":
                tables[name] = None
                continue
            if not isinstance(rows, (list, tuple)) or len(rows) != len(batch_sizes):
                raise ValueError(f"{what}: {name} needs one row per batch size ({len(batch_sizes)})")
            tables[name] = tuple(tuple(finite_list(r, f"{what}: {name}", len(sizes))) for r in rows)
        if not is_int(doc["context_len"]) or doc["context_len"] < 1:
            raise ValueError(f"{what}: context_len must be a positive int, got {doc['context_len']!r}")
        return cls(device=str(doc["device"]), dtype=str(doc["dtype"]), target=str(doc["target"]),
                   draft=None if doc["draft"] is None else str(doc["draft"]), context_len=doc["context_len"],
                   batch_sizes=tuple(batch_sizes), sizes=tuple(sizes), repeats=int(doc["repeats"]),
                   verify_seconds=tables["verify_seconds"], draft_seconds=tables["draft_seconds"],
                   spread=doc.get("spread") or {}, versions=doc.get("versions") or {}, created=doc.get("created", ""))


def _random_tree(batch_size: int, n: int, gen: torch.Generator, vocab: int, device: torch.device) -> "TreeBatch":
    """A random recursive tree of n nodes per row (parent of node i uniform in [0, i)): depth ~ ln n."""
    from .tree import TreeBatch

    i = torch.arange(n)
    parents = (torch.rand(batch_size, n, generator=gen) * i).floor().to(torch.int64)
    parents[:, 0] = -1
    tokens = torch.randint(0, vocab, (batch_size, n), generator=gen)
    return TreeBatch(tokens.to(device), parents.to(device), torch.full((batch_size,), n, device=device))


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


def _time_model(model: PreTrainedModel, batch_size: int, context_len: int, sizes: tuple[int, ...], repeats: int,
                backend: str, gen: torch.Generator, bar) -> tuple[list[float], list[float]]:
    """Median seconds and relative spread of a tree forward of each size over a filled cache."""
    from .attention import tree_forward
    from .verify import vocab_size

    cache = _filled_cache(model, batch_size, context_len, max(sizes))
    medians, spreads = [], []
    for n in sizes:
        tree = _random_tree(batch_size, n, gen, vocab_size(model), model.device)
        mask, pos = tree.ancestor_mask, tree.positions(cache.positions())

        def step():
            tree_forward(model, cache, tree.tokens, pos, mask, backend=backend)
            cache.rollback()

        _timed(step, 1, model.device)  # warm-up: allocator, kernel selection, Triton compilation
        t = np.array(_timed(step, repeats, model.device))
        q25, med, q75 = np.percentile(t, [25, 50, 75])
        medians.append(float(med))
        spreads.append(float((q75 - q25) / med))
        bar.update(1)
    return medians, spreads


def profile(target: PreTrainedModel, draft: PreTrainedModel | None = None, *,
            batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES, context_len: int = 512,
            sizes: tuple[int, ...] = DEFAULT_SIZES, repeats: int = 5, backend: str = "auto",
            progress: bool = True) -> Profile:
    """Time the target's tree forward (and the draft's layer forward) on this device.

    For each batch size and tree size n: a `TreeCache` holding `context_len` tokens per row, a random valid
    tree of n nodes per row, one warm-up forward (excluded), then `repeats` timed forwards; the median is
    kept. CUDA events on a GPU, perf_counter on the CPU. Sizes must resolve the knee where verification
    turns compute-bound (the default doubles from 1 to 256).
    """
    from tqdm import tqdm

    from .attention import install

    batch_sizes, sizes = tuple(batch_sizes), tuple(sizes)
    for name, values in (("batch_sizes", batch_sizes), ("sizes", sizes)):
        if not values or any(not is_int(v) or v < 1 for v in values) or list(values) != sorted(set(values)):
            raise ValueError(f"{name}: expected increasing positive ints, got {values!r}")
    if len(sizes) < 3:
        raise ValueError(f"sizes: the fit needs at least 3 tree sizes, got {sizes!r}")
    if not is_int(repeats) or repeats < 1:
        raise ValueError(f"repeats: expected an int >= 1, got {repeats!r}")
    limit = target.config.get_text_config().max_position_embeddings
    if not is_int(context_len) or context_len < 1 or context_len + max(sizes) > limit:
        raise ValueError(f"context_len: expected an int >= 1 with context_len + {max(sizes)} <= the model's "
                         f"{limit} positions, got {context_len!r}")
    if draft is not None and draft.device != target.device:
        raise ValueError(f"draft: on {draft.device}, the target on {target.device}")
    models = [("verify", target)] + ([("draft", draft)] if draft is not None else [])
    for _, model in models:
        install(model)
    gen = torch.Generator().manual_seed(0)
    table: dict[str, list[list[float]]] = {role: [] for role, _ in models}
    spread: dict[str, list[list[float]]] = {role: [] for role, _ in models}
    with torch.inference_mode(), tqdm(total=len(batch_sizes) * len(models) * len(sizes), desc="profile",
                                      unit="shape", disable=not progress) as bar:
        for b in batch_sizes:
            for role, model in models:
                med, spr = _time_model(model, b, context_len, sizes, repeats, backend, gen, bar)
                table[role].append(med)
                spread[role].append(spr)
    return Profile(device=device_name(target.device), dtype=str(target.dtype).removeprefix("torch."),
                   target=model_name(target), draft=model_name(draft), context_len=context_len,
                   batch_sizes=batch_sizes, sizes=sizes, repeats=repeats,
                   verify_seconds=tuple(map(tuple, table["verify"])),
                   draft_seconds=tuple(map(tuple, table["draft"])) if draft is not None else None,
                   spread=spread, versions=_versions(), created=time.strftime("%Y-%m-%dT%H:%M:%S"))


def cached_profile(target: PreTrainedModel, draft: PreTrainedModel | None = None, *, progress: bool = True,
                   **settings) -> Profile:
    """`profile(target, draft, **settings)`, run once per device, dtype, models' weights, package source and
    settings (`records.content_key`) and kept as JSON under $SPECDEC_CACHE/profiles (default
    ~/.cache/specdec/profiles). A cached file that no longer validates is measured again."""
    from .records import cache_file, content_key

    key = content_key("profile", {"target": target, "draft": draft}, device=device_name(target.device),
                      dtype=str(target.dtype), settings=settings)
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
