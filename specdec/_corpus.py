"""Reading a datastore's sources into token documents: files, folders, JSONL, token arrays, strings."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Iterable, Union

import numpy as np
from tqdm import tqdm
from transformers import PreTrainedTokenizerBase

__all__ = ["Source", "TEXT_SUFFIXES", "collect_documents"]

Source = Union[str, os.PathLike, np.ndarray]
# Files a folder contributes; a file named explicitly is read as text whatever its suffix.
TEXT_SUFFIXES = frozenset({".py", ".pyi", ".txt", ".md", ".rst", ".c", ".h", ".cc", ".cpp", ".hpp", ".rs", ".go",
                           ".java", ".js", ".ts", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".html", ".css",
                           ".tex", ".jsonl", ".npy"})
SKIP_DIRS = frozenset({"__pycache__", ".git", "node_modules"})
BATCH = 64  # texts per tokenizer call: fast tokenizers encode a batch on several threads


def collect_documents(tokenizer: PreTrainedTokenizerBase | None, sources: Iterable[Source], texts: Iterable[str],
                      vocab_size: int, *, text_field: str = "text",
                      progress: bool = False) -> tuple[list[np.ndarray], list[str]]:
    """Token documents ([n] int64 each, ids in [0, vocab_size)) and a name per source, in source order."""
    pending: list[str | np.ndarray] = []  # texts to tokenise and ready token arrays, in order
    names, arrays = [], 0
    for source in sources:
        if isinstance(source, np.ndarray):
            pending.append(_check_tokens(source, vocab_size, "sources: a token array"))
            arrays += 1
            continue
        path = Path(source)
        if not path.exists():
            raise ValueError(f"sources: no such file or folder: {path}")
        files = _files(path) if path.is_dir() else [path]
        for f in files:
            pending += _read(f, vocab_size, text_field)
        names.append(str(path))
    if arrays:
        names.append(f"<{arrays} token arrays>")
    texts = list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("texts: expected strings")
    pending += texts
    if texts:
        names.append(f"<{len(texts)} texts>")
    if any(isinstance(p, str) for p in pending) and tokenizer is None:
        raise ValueError("tokenizer: needed for text sources (None works only with token arrays)")
    return _tokenize(tokenizer, pending, vocab_size, progress), names


def _files(folder: Path) -> list[Path]:
    out = []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        out += [Path(root) / f for f in sorted(files) if Path(f).suffix in TEXT_SUFFIXES]
    return out


def _read(file: Path, vocab_size: int, text_field: str) -> list[str | np.ndarray]:
    if file.suffix == ".npy":
        try:
            array = np.load(file, allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"sources: {file} is not a readable .npy token array ({err})") from err
        return [_check_tokens(array, vocab_size, f"sources: {file}")]
    text = file.read_text(encoding="utf-8", errors="replace")
    if file.suffix != ".jsonl":
        return [text] if text else []
    docs = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                value = json.loads(line).get(text_field) if line.lstrip().startswith("{") else None
            except json.JSONDecodeError as err:
                raise ValueError(f"sources: {file} line {n} is not JSON ({err})") from err
            if not isinstance(value, str):
                raise ValueError(f"sources: {file} line {n} has no string field {text_field!r} (text_field)")
            docs.append(value)
    return docs


def _check_tokens(array: np.ndarray, vocab_size: int, what: str) -> np.ndarray:
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{what}: expected a 1-D integer array of token ids, got {array.dtype}{list(array.shape)}")
    if array.size and (int(array.min()) < 0 or int(array.max()) >= vocab_size):
        raise ValueError(f"{what}: token ids outside the vocabulary [0, {vocab_size})")
    return array.astype(np.int64, copy=False)


def _tokenize(tokenizer: PreTrainedTokenizerBase | None, pending: list[str | np.ndarray], vocab_size: int,
              progress: bool) -> list[np.ndarray]:
    out: list[np.ndarray] = []
    texts = [p for p in pending if isinstance(p, str)]
    encoded: list[list[int]] = []
    with tqdm(total=len(texts), desc="tokenising", unit="doc", disable=not progress or not texts,
              file=sys.stderr) as bar:
        for i in range(0, len(texts), BATCH):
            batch = texts[i:i + BATCH]
            # long documents are fine here: nothing feeds them to a model, so skip the length warning
            encoded += tokenizer(batch, add_special_tokens=False, verbose=False).input_ids
            bar.update(len(batch))
    it = iter(encoded)
    for p in pending:
        ids = np.asarray(next(it), dtype=np.int64) if isinstance(p, str) else p
        if ids.size:
            out.append(ids)
    if out and int(max(int(d.max()) for d in out)) >= vocab_size:
        raise ValueError(f"tokenizer: produced ids beyond its {vocab_size} tokens")
    return out
