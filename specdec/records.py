"""What specdec keeps on disk between runs: where (`cache_dir`), under which key (`content_key`), and how a
file is written so that an interrupted run never leaves half of it (`atomic_write_text`).

A cached profile or calibration is only as good as its key. The key covers what the cached numbers
depend on, by content rather than by name:

* each model's weights identity (`weights_identity`): a sha256 of its config and, for a model loaded
  from a folder, of its weight files' names, sizes and modification times (a model retrained in place
  gets a new key); for a model built in memory (``from_config``, or weights changed after loading), of
  its parameters' names, shapes, dtypes and a strided sample of their values;
* the package's source (`source_hash`: sha256 over specdec's and its kernels' ``*.py``, once per process),
  so a code change never reuses a number the old code measured;
* the device, the dtype and the call's settings.
"""

from __future__ import annotations

import functools
import hashlib
import contextlib
import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import torch
from transformers import PreTrainedModel

__all__ = ["atomic_path", "atomic_write_text", "cache_dir", "cache_file", "content_key", "source_hash",
           "weights_identity"]

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
# Values sampled per parameter for an in-memory model's identity: a strided sample covers the whole tensor,
# so a retrained or perturbed model differs in it; 64 tensors x 256 values stay well under a millisecond.
SAMPLED_TENSORS, SAMPLED_VALUES = 64, 256


def cache_dir() -> Path:
    """Where specdec caches what it builds on first use: $SPECDEC_CACHE, default ~/.cache/specdec."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


@functools.lru_cache(maxsize=1)
def source_hash() -> str:
    """sha256 over the package's Python sources (specdec/ and its Triton kernels), computed once per process."""
    package = Path(__file__).resolve().parent
    roots = [package]
    checkout_kernels = package.parent / "kernels"  # a source checkout; installed, they live in specdec/kernels
    if not (package / "kernels").is_dir() and checkout_kernels.is_dir():
        roots.append(checkout_kernels)
    digest = hashlib.sha256()
    for root in roots:
        for file in sorted(root.rglob("*.py")):
            if "__pycache__" in file.parts:
                continue
            digest.update(f"{root.name}/{file.relative_to(root).as_posix()}\0".encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def _config_text(model: PreTrainedModel) -> str:
    """The config as JSON, without what names the model rather than describes it (its path, versions,
    the attention implementation specdec switches to)."""
    raw = model.config.to_dict() if hasattr(model.config, "to_dict") else model.config.to_json()  # an EAGLE head's
    config = {k: v for k, v in raw.items()
              if not k.startswith("_") and k not in ("transformers_version", "torch_dtype", "dtype")}
    return json.dumps(config, sort_keys=True, default=str)


def _weight_files(model: PreTrainedModel) -> list[Path]:
    folder = Path(str(getattr(model.config, "_name_or_path", "") or ""))
    if not str(folder) or not folder.is_dir():
        return []
    return sorted(f for f in folder.iterdir() if f.is_file() and f.name.endswith(WEIGHT_SUFFIXES))


def _sampled_values(model: PreTrainedModel, digest: Any) -> None:
    """Names, shapes and dtypes of every parameter, and a strided sample of up to SAMPLED_TENSORS of them."""
    params = list(model.named_parameters())
    every = max(1, len(params) // SAMPLED_TENSORS)
    for i, (name, p) in enumerate(params):
        digest.update(f"{name}:{tuple(p.shape)}:{p.dtype}\0".encode())
        if i % every or p.device.type == "meta":
            continue
        flat = p.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // SAMPLED_VALUES)][:SAMPLED_VALUES]
        digest.update(sample.float().cpu().numpy().tobytes())  # a few hundred values: a tiny device copy


def weights_identity(model: PreTrainedModel) -> str:
    """sha256 identifying a model's weights: its config, plus its weight files' names, sizes and mtimes
    when it was loaded from a folder, else a sample of its parameters (see the module docstring).

    A model loaded from a folder and then changed in memory keeps the folder's identity: pass such a
    model's changes through its settings, or save it first.
    """
    digest = hashlib.sha256(_config_text(model).encode())
    files = _weight_files(model)
    if files:
        for f in files:
            stat = f.stat()
            digest.update(f"{f.name}:{stat.st_size}:{stat.st_mtime_ns}\0".encode())
    else:
        with torch.no_grad():
            _sampled_values(model, digest)
    return digest.hexdigest()


def content_key(kind: str, models: dict[str, PreTrainedModel | None], *, device: str, dtype: str,
                settings: dict) -> str:
    """The hex sha256 naming a cached record of `kind` ("profile", "calibration", ...): the models'
    weights identities (None for an absent role), the package's source hash, device, dtype and
    `settings` (JSON-serialisable; tuples count as lists)."""
    doc = {"kind": kind, "source": source_hash(), "device": device, "dtype": dtype, "settings": settings,
           "models": {role: None if m is None else weights_identity(m) for role, m in sorted(models.items())}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()


def cache_file(folder: str, prefix: str, key: str, suffix: str = ".json") -> Path:
    """``cache_dir()/<folder>/<prefix>-<first 16 hex digits of key><suffix>``."""
    return cache_dir() / folder / f"{prefix}-{key[:16]}{suffix}"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A unique temporary path beside `path` (same suffix, so writers that infer the format from it still
    do) that replaces `path` when the block ends normally and is removed otherwise: readers, and a run
    interrupted mid-write, see the old file or the new one, never a part of it."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:12]}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` atomically (`atomic_path`), flushed to disk before the switch."""
    with atomic_path(path) as tmp, open(tmp, "x", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
