"""Loading models and tokenizers from a local path or a hub id (offline machines: local paths)."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["DTYPES", "load_model", "load_tokenizer", "resolve_device"]

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def resolve_device(device: str) -> torch.device:
    """"auto" -> cuda when available, else cpu; anything else as torch parses it."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        return torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"device: {device!r} is not a torch device") from err


def load_model(name_or_path: str, *, dtype: str = "float32", device: str = "auto") -> PreTrainedModel:
    """An eval-mode causal LM in `dtype` on `device`."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {sorted(DTYPES)}, got {dtype!r}")
    model = AutoModelForCausalLM.from_pretrained(name_or_path, dtype=DTYPES[dtype])
    return model.to(resolve_device(device)).eval()


def load_tokenizer(name_or_path: str) -> PreTrainedTokenizerBase:
    """The tokenizer, set up for batched generation: left padding, a pad token (EOS when it has none)."""
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"tokenizer: {name_or_path!r} has neither a pad nor an EOS token to pad with")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
