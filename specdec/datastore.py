"""A token datastore for retrieval (REST): a corpus as one int32 token array plus its suffix array.

Layout of a datastore directory::

    datastore.json          header: format, version, tokenizer name, vocabulary hash and size, counts, sources,
                            the current generation's folder and the sha256 of each of its arrays
    gen-<id>/tokens.npy     [N] int32: every document's tokens followed by SEPARATOR (-1)
    gen-<id>/suffix_array.npy  [N] int32 (int64 past 2^31 tokens): start positions of the suffixes in sorted order
    .lock                   held (``filelock``) while a build or an append writes

The separator is -1, which is no token id: a query (a context suffix, ids >= 0) can never match across it,
and a continuation read past a document's end meets it and stops, since -1 is also the padding value of
continuations. Both arrays are written with `np.save` (never pickle) and opened memory-mapped, so a store
larger than memory is paged in on demand. The suffix array comes from `pydivsufsort`, which sorts int32
arrays as big-endian bytes (any vocabulary up to 2^31 ids; -1 sorts below every token).

Writes never lose a store. A build or an append writes a new generation folder (under a unique temporary
name, renamed when complete), then replaces the header (a unique temporary file, `os.replace`): until that
one atomic switch every reader sees the previous store whole, after it the new one, and an interrupted
write leaves the previous store (plus a stale folder the next write removes). Builds and appends into one
folder take its lock, so an append reads the store as the previous writer left it. Opening verifies the
arrays against the header's sha256 (one pass, ~1.7 GB/s here), so damaged or mixed arrays are refused
with a ValueError naming the file; stores above `VERIFY_ON_OPEN_BYTES` are verified on first query instead.

Queries are host-side numpy, vectorised over rows and suffix lengths: one binary search per (row, length)
over the suffix array, all advanced together for ceil(log2 N) rounds, each round gathering <= 16 tokens
per search from the memory map.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import sysconfig
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Union

import numpy as np
from transformers import PreTrainedTokenizerBase

from ._corpus import Source, collect_documents
from .records import atomic_write_text, cache_file, content_key, read_json, require_extra

__all__ = ["Datastore", "Match", "SEPARATOR", "orphaned_arrays", "stdlib_datastore", "vocab_hash"]

FORMAT = "specdec-datastore"
VERSION = 2  # 1: arrays beside the header, no checksums (refused with a rebuild hint)
SEPARATOR = -1
HEADER, TOKENS, SUFFIXES, LOCK = "datastore.json", "tokens.npy", "suffix_array.npy", ".lock"
GENERATION = re.compile(r"gen-[0-9a-f]{12}")
# Arrays up to this size are checksummed when opened (~0.6 s at 1 GiB); larger stores on their first query.
VERIFY_ON_OPEN_BYTES = 1 << 30
PathLike = Union[str, os.PathLike]
# The demo store's corpus: the standard library's Python files minus generated tables and docs data, the
# same files the embedded demo pair was trained on (scripts/train_demo_pair.py).
STDLIB_EXCLUDE = frozenset({"encodings", "pydoc_data", "site-packages", "__pycache__"})


def vocab_hash(tokenizer: PreTrainedTokenizerBase) -> str:
    """sha256 of the tokenizer's vocabulary (token string -> id, added tokens included)."""
    items = sorted(tokenizer.get_vocab().items(), key=lambda kv: kv[1])
    return hashlib.sha256(json.dumps(items, ensure_ascii=False).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Match:
    """The longest matched context suffix of each row.

    length: [B] int64, matched suffix length n (0: no match); lo, hi: [B] int64, the suffix-array range
    [lo, hi) of its occurrences (empty when length is 0).
    """

    length: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


class Datastore:
    """An opened datastore: `tokens` [N] int32 and `suffix_array` [N] (memory maps), `header` (dict)."""

    def __init__(self, path: Path, header: dict, tokens: np.ndarray, suffix_array: np.ndarray, *,
                 verified: bool = True):
        self.path = path
        self._set(header, tokens, suffix_array, verified)

    def _set(self, header: dict, tokens: np.ndarray, suffix_array: np.ndarray, verified: bool = True) -> None:
        self.header, self.tokens, self.suffix_array = header, tokens, suffix_array
        # plain ndarray views of the maps: same pages, without np.memmap's per-indexing overhead (~2x on
        # the small gathers of a binary search round)
        self._views = (np.asarray(tokens), np.asarray(suffix_array))
        self._verified = verified

    # ------------------------------------------------------------------ building
    @classmethod
    def build(cls, tokenizer: PreTrainedTokenizerBase | None, sources: Iterable[Source], out_dir: PathLike, *,
              texts: Iterable[str] = (), vocab_size: int | None = None, text_field: str = "text",
              progress: bool = True) -> "Datastore":
        """Tokenise `sources` and `texts` with `tokenizer` and write a datastore to `out_dir` (a store
        already there is replaced atomically: readers see it whole until the new one is complete).

        sources: text or code files; folders (their text files, recursively, in sorted order); `.jsonl`
                 files (one document per line, from `text_field`); `.npy` files or 1-D integer arrays of
                 token ids (one document each). texts: strings, one document each (e.g. model answers).
        tokenizer: a Hugging Face tokenizer; None only when every source is a token array, and then
                 `vocab_size` bounds the ids.
        """
        out = Path(out_dir)
        if out.exists() and not out.is_dir():
            raise ValueError(f"out_dir: {out} exists and is not a folder")
        size = _vocab_size(tokenizer, vocab_size)
        docs, names = collect_documents(tokenizer, sources, texts, size, text_field=text_field, progress=progress)
        if not docs:
            raise ValueError("sources: no documents found (empty files and folders without text files count as none)")
        header = {"format": FORMAT, "version": VERSION, "separator": SEPARATOR,
                  "tokenizer": None if tokenizer is None else str(tokenizer.name_or_path),
                  "vocab_hash": None if tokenizer is None else vocab_hash(tokenizer), "vocab_size": size,
                  "documents": len(docs), "sources": _summary(names)}
        out.mkdir(parents=True, exist_ok=True)
        with _locked(out):
            return cls._write(out, _join(docs), header)

    def extend(self, tokenizer: PreTrainedTokenizerBase, sources: Iterable[Source] = (), *, texts: Iterable[str] = (),
               text_field: str = "text", progress: bool = False) -> "Datastore":
        """Append documents (e.g. past responses) and rebuild the suffix array, on disk and here.

        The tokenizer must match the one the store was built with. The append goes to the store as it is
        on disk when the folder's lock is taken (another process may have appended meanwhile); it is
        written as a new generation, so an interrupted append leaves the store as it was. Other
        `Datastore` objects opened on the folder keep reading the previous arrays until reopened.
        """
        self.check_tokenizer(tokenizer)
        docs, names = collect_documents(tokenizer, sources, texts, self.vocab_size, text_field=text_field,
                                        progress=progress)
        if not docs:
            return self
        with _locked(self.path):
            current = Datastore.open(self.path, tokenizer=tokenizer, verify=True)
            tokens = np.concatenate([np.asarray(current.tokens), _join(docs)])
            header = {k: current.header[k] for k in ("format", "version", "separator", "tokenizer", "vocab_hash",
                                                     "vocab_size")}
            header.update(documents=current.header["documents"] + len(docs),
                          sources=_summary(current.header["sources"] + names))
            fresh = self._write(self.path, tokens, header)
        self._set(fresh.header, fresh.tokens, fresh.suffix_array)
        return self

    @classmethod
    def _write(cls, out: Path, tokens: np.ndarray, header: dict) -> "Datastore":
        """Write `tokens`, its suffix array and `header` as a new generation of `out` and switch to it.
        The caller holds the folder's lock."""
        divsufsort = require_extra("pydivsufsort", "building a datastore's suffix array").divsufsort
        t0 = time.perf_counter()
        suffixes = divsufsort(tokens)  # int32 while the array's 4N bytes stay below 2^31, int64 beyond
        seconds = time.perf_counter() - t0
        generation = f"gen-{uuid.uuid4().hex[:12]}"
        staging = out / f".{generation}.tmp"
        staging.mkdir()
        try:
            for name, array in ((TOKENS, tokens), (SUFFIXES, suffixes)):
                with open(staging / name, "xb") as f:
                    np.save(f, array, allow_pickle=False)
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(staging, out / generation)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        header = {**header, "num_tokens": int(tokens.size), "max_token": int(tokens.max()),
                  "suffix_dtype": str(suffixes.dtype), "suffix_seconds": round(seconds, 3),
                  "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "generation": generation,
                  "sha256": {TOKENS: _sha256(tokens), SUFFIXES: _sha256(suffixes)}}
        atomic_write_text(out / HEADER, json.dumps(header, indent=1))  # the switch
        _remove_stale(out, generation)
        store = cls.open(out, verify=False)
        store._verified = True  # hashed just now, from these very arrays
        return store

    # ------------------------------------------------------------------ opening
    @classmethod
    def open(cls, path: PathLike, *, tokenizer: PreTrainedTokenizerBase | None = None,
             verify: bool | None = None) -> "Datastore":
        """Memory-map a datastore folder; with `tokenizer`, check it is the one the store was built with.

        verify: check the arrays against the header's sha256 now (True), on the first query (False), or
        now when they hold at most `VERIFY_ON_OPEN_BYTES` (None, the default).
        Raises ValueError for a missing, foreign or older header, a tokenizer mismatch, and arrays that are
        truncated, damaged, or from another store, naming the file.
        """
        path = Path(path)
        for attempt in range(3):
            header = _read_header(path)
            folder = path / header["generation"]
            try:
                n = header["num_tokens"]
                tokens = _load(folder / TOKENS, (n,), ("int32",))
                suffixes = _load(folder / SUFFIXES, (n,), (header["suffix_dtype"],))
                break
            except ValueError:
                # A writer may have switched generations (and removed this one) between the two reads.
                if attempt == 2 or _read_header(path)["generation"] == header["generation"]:
                    raise
        store = cls(path, header, tokens, suffixes, verified=False)
        if verify or (verify is None and tokens.nbytes + suffixes.nbytes <= VERIFY_ON_OPEN_BYTES):
            store.verify()
        if tokenizer is not None:
            store.check_tokenizer(tokenizer)
        return store

    def verify(self) -> None:
        """Check both arrays against the header's sha256 (one pass over the store; ~1.7 GB/s on this CPU),
        then that they end as a store must (the final separator, the one-token suffix [-1] first)."""
        folder = self.path / self.header["generation"]
        for name, array in ((TOKENS, self.tokens), (SUFFIXES, self.suffix_array)):
            if _sha256(array) != self.header["sha256"][name]:
                raise ValueError(f"{name}: its contents in {folder} differ from the checksum in {self.path / HEADER} "
                                 "(damaged or replaced); rebuild the datastore")
        n = self.num_tokens
        if self.tokens[-1] != SEPARATOR or self.suffix_array[0] != n - 1:
            raise ValueError(f"path: {self.path} has arrays that do not belong together (corrupt or mixed stores)")
        self._verified = True

    def check_tokenizer(self, tokenizer: PreTrainedTokenizerBase) -> None:
        """ValueError unless `tokenizer` has the vocabulary this store was built with."""
        built_with = self.header["tokenizer"]
        if self.header["vocab_hash"] is None:
            size = len(tokenizer)
            if size != self.vocab_size:
                raise ValueError(f"tokenizer: {size} tokens, the datastore at {self.path} was built from token arrays "
                                 f"over a vocabulary of {self.vocab_size}")
            return
        if vocab_hash(tokenizer) != self.header["vocab_hash"]:
            raise ValueError(f"tokenizer: {tokenizer.name_or_path!r} ({len(tokenizer)} tokens) does not match the "
                             f"datastore at {self.path}, built with {built_with!r} ({self.vocab_size} tokens): "
                             "vocabulary hashes differ")

    @property
    def num_tokens(self) -> int:
        return int(self.header["num_tokens"])

    @property
    def vocab_size(self) -> int:
        return int(self.header["vocab_size"])

    @property
    def documents(self) -> int:
        return int(self.header["documents"])

    def info(self) -> dict:
        """The header plus sizes on disk (what `specdec datastore info` prints)."""
        folder = self.path / self.header["generation"]
        files = {HEADER: (self.path / HEADER).stat().st_size,
                 **{name: (folder / name).stat().st_size for name in (TOKENS, SUFFIXES)}}
        return {**self.header, "path": str(self.path), "bytes": files, "total_bytes": sum(files.values())}

    # ------------------------------------------------------------------ queries
    def longest_match(self, context: np.ndarray, *, max_suffix: int = 16, min_suffix: int = 2) -> Match:
        """Per row, the longest suffix of `context` (max_suffix down to min_suffix tokens) in the store.

        context: [B, L] int64, each row's last tokens right-aligned, -1 left padding for short rows; a
        suffix that reaches into the padding is not tried. The first query of a store too large to be
        verified when opened verifies it (see `open`).
        """
        if not self._verified:
            self.verify()
        B, L = context.shape
        lengths = np.arange(max_suffix, min_suffix - 1, -1)  # [Ln], longest first
        cols = L - lengths[:, None] + np.arange(max_suffix)[None, :]  # [Ln, max_suffix]
        inside = (cols < L) & (cols >= 0)
        query = np.where(inside[None], context[:, np.clip(cols, 0, L - 1)], 0)  # [B, Ln, max_suffix]
        usable = ((query >= 0) | ~inside[None]).all(-1) & (lengths <= L)[None, :]  # [B, Ln]
        qlen = np.broadcast_to(lengths, (B, lengths.size)).ravel()
        lo, hi = self._ranges(query.reshape(-1, max_suffix), qlen)
        lo, hi = lo.reshape(B, -1), hi.reshape(B, -1)
        found = usable & (hi > lo)
        best = found.argmax(1)  # the longest length that matched
        rows = np.arange(B)
        any_found = found.any(1)
        return Match(np.where(any_found, lengths[best], 0).astype(np.int64),
                     np.where(any_found, lo[rows, best], 0), np.where(any_found, hi[rows, best], 0))

    def continuations(self, match: Match, *, max_matches: int = 5000, length: int = 10) -> np.ndarray:
        """[B, M, K] int64: up to M = max_matches continuations of K = `length` tokens per row, -1 padded.

        When a suffix occurs more than `max_matches` times, the occurrences are taken evenly spaced over
        its suffix-array range (REST takes the first ones, which are the lexicographically smallest
        continuations, a biased sample). Rows stay in suffix-array order, i.e. lexicographically sorted.
        A continuation stops at the separator (the end of its document).
        """
        if not self._verified:
            self.verify()
        count = np.where(match.length > 0, match.hi - match.lo, 0)  # [B]
        take = np.minimum(count, max_matches)
        M = max(int(take.max()), 1)
        j = np.arange(M)[None, :]
        valid = j < take[:, None]  # [B, M]
        rank = match.lo[:, None] + (j * count[:, None]) // np.maximum(take, 1)[:, None]
        tokens, suffixes = self._views
        start = suffixes[np.where(valid, rank, 0)].astype(np.int64) + match.length[:, None]
        idx = start[:, :, None] + np.arange(length)[None, None, :]  # [B, M, K]
        n = self.num_tokens
        tok = tokens[np.minimum(idx, n - 1)].astype(np.int64)
        tok = np.where(valid[:, :, None] & (idx < n), tok, SEPARATOR)
        return np.where(np.cumprod(tok >= 0, axis=-1).astype(bool), tok, -1)

    def _ranges(self, query: np.ndarray, qlen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Suffix-array ranges [lo, hi) of the suffixes starting with query[s, :qlen[s]]. query: [S, L] >= 0.

        Lower and upper bounds are searched together: both move right while (suffix - query), compared
        lexicographically over the first qlen tokens, is below a threshold (0: lower, 1: upper, i.e. <= 0).
        """
        S, L = query.shape
        last = self.num_tokens - 1
        tokens, suffixes = self._views
        q = np.concatenate([query, query])  # [2S, L]
        live = (np.arange(L)[None, :] < np.concatenate([qlen, qlen])[:, None]).astype(np.int64)  # [2S, L]
        threshold = np.repeat(np.array([0, 1]), S)
        cols, rows = np.arange(L)[None, :], np.arange(2 * S)
        lo, hi = np.zeros(2 * S, dtype=np.int64), np.full(2 * S, last + 1, dtype=np.int64)
        for _ in range((last + 1).bit_length()):  # ceil(log2(N + 1)) rounds close every interval
            mid = (lo + hi) >> 1
            idx = suffixes[np.minimum(mid, last)].astype(np.int64)[:, None] + cols  # [2S, L]
            # Positions past the end read the final separator (-1): a suffix meets it there before running
            # off, and -1 is below every query token, so clipping never changes a comparison.
            d = (tokens[np.minimum(idx, last)] - q) * live
            right = d[rows, (d != 0).argmax(1)] < threshold  # first difference (0 when equal)
            lo = np.where(right & (lo < hi), mid + 1, lo)
            hi = np.where(right, hi, mid)
        return lo[:S], lo[S:]


def stdlib_datastore(tokenizer: PreTrainedTokenizerBase, *, max_files: int | None = None,
                     progress: bool = True) -> Datastore:
    """A datastore of this Python's standard library source, built on first use and cached.

    Keyed (`records.content_key`) by the package's source hash, the Python version, the tokenizer's
    vocabulary hash and `max_files` (the first files in sorted order; None: all), under
    `records.cache_dir()/datastores/`. All files make about 8.6M tokens with the demo pair's 4,096-token tokenizer
    (Python 3.11). A store that fails to open (an interrupted build, damaged arrays, a store written by an
    older specdec) is rebuilt.
    """
    settings = {"python": platform.python_version(), "vocab_hash": vocab_hash(tokenizer), "max_files": max_files}
    key = content_key("stdlib-datastore", {}, device="cpu", dtype="int32", settings=settings)
    path = cache_file("datastores", "stdlib", key, suffix="")
    if (path / HEADER).is_file():
        try:
            return Datastore.open(path, tokenizer=tokenizer)
        except ValueError:
            pass  # an interrupted or damaged build: build it again
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(f for f in root.rglob("*.py") if not STDLIB_EXCLUDE & set(f.relative_to(root).parts))
    return Datastore.build(tokenizer, files[:max_files], path, progress=progress)


def _vocab_size(tokenizer: PreTrainedTokenizerBase | None, vocab_size: int | None) -> int:
    if tokenizer is None:
        if vocab_size is None or vocab_size < 1:
            raise ValueError(f"vocab_size: needed (an int >= 1) when tokenizer is None, got {vocab_size!r}")
        return int(vocab_size)
    size = len(tokenizer)
    if vocab_size is not None and vocab_size != size:
        raise ValueError(f"vocab_size: {vocab_size} disagrees with the tokenizer's {size} tokens")
    if size >= 2**31:
        raise ValueError(f"tokenizer: {size} tokens do not fit int32 ids")
    return size


def _summary(names: list[str], keep: int = 50) -> list[str]:
    """The header's source list, cut to `keep` names so a build from thousands of files stays a small header."""
    if len(names) <= keep:
        return names
    return names[:keep] + [f"... and {len(names) - keep} more"]


def _join(docs: list[np.ndarray]) -> np.ndarray:
    """[sum(len(d) + 1)] int32: each document followed by the separator."""
    sep = np.array([SEPARATOR], dtype=np.int32)
    return np.concatenate([part for d in docs for part in (d.astype(np.int32, copy=False), sep)])


def _read_header(path: Path) -> dict:
    file = path / HEADER
    if not file.is_file():
        raise ValueError(f"path: {path} holds no datastore ({HEADER} is missing)")
    header = read_json(file, "path", FORMAT)
    if header.get("version") == 1:
        sources = ", ".join(map(str, header.get("sources") or []))
        raise ValueError(f"path: {path} was written by an older specdec (datastore format 1, without checksums); "
                         f"rebuild it: specdec datastore build --tokenizer {header.get('tokenizer') or 'TOKENIZER'} "
                         f"--out {path} SOURCES... (it was built from {sources})")
    if header.get("version") != VERSION:
        raise ValueError(f"path: {file} has format version {header.get('version')!r}; this specdec reads {VERSION}")
    missing = {"num_tokens", "vocab_size", "vocab_hash", "tokenizer", "documents", "sources", "generation",
               "sha256", "max_token", "suffix_dtype"} - set(header)
    if missing:
        raise ValueError(f"path: {file} lacks {sorted(missing)}")
    for name in ("num_tokens", "vocab_size", "documents", "max_token"):
        value = header[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < (0 if name == "max_token" else 1):
            raise ValueError(f"path: {file} has {name} {value!r}, not a positive int")
    if header["max_token"] >= header["vocab_size"]:
        raise ValueError(f"path: {file} says its tokens reach id {header['max_token']}, beyond its vocabulary of "
                         f"{header['vocab_size']}")
    if not isinstance(header["generation"], str) or not GENERATION.fullmatch(header["generation"]):
        raise ValueError(f"path: {file} names no valid generation folder ({header['generation']!r})")
    sums = header["sha256"]
    if not isinstance(sums, dict) or not all(isinstance(sums.get(k), str) for k in (TOKENS, SUFFIXES)):
        raise ValueError(f"path: {file} lacks the sha256 of {TOKENS} and {SUFFIXES}")
    if header["suffix_dtype"] not in ("int32", "int64") or not isinstance(header["sources"], list):
        raise ValueError(f"path: {file} has a malformed suffix_dtype or sources field")
    return header


def _load(file: Path, shape: tuple[int, ...], dtypes: tuple[str, ...]) -> np.ndarray:
    try:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as err:  # missing, truncated (mmap past the end) or bad header
        raise ValueError(f"{file.name}: truncated, corrupt or missing in {file.parent} ({err})") from err
    if array.shape != shape or str(array.dtype) not in dtypes:
        raise ValueError(f"{file.name}: {array.dtype}{list(array.shape)} in {file.parent}, the header says "
                         f"{'/'.join(dtypes)}{list(shape)}: truncated or from another store")
    return array


def _sha256(array: np.ndarray) -> str:
    """sha256 of an array's bytes (C order), in chunks so that a memory map is paged in a piece at a time."""
    flat = np.asarray(array).reshape(-1)
    digest = hashlib.sha256()
    step = (64 << 20) // max(flat.itemsize, 1)
    for i in range(0, flat.size, step):
        digest.update(np.ascontiguousarray(flat[i:i + step]))
    return digest.hexdigest()


def _locked(folder: Path):
    """The folder's write lock (``filelock``): builds and appends into one folder run one at a time."""
    from filelock import FileLock

    return FileLock(str(folder / LOCK))


def _remove_stale(out: Path, keep: str) -> None:
    """After a switch to generation `keep`: earlier generations, staging folders of interrupted writes,
    and the arrays a format-1 store kept beside its header (its temporary files too)."""
    for entry in out.iterdir():
        name = entry.name
        if name == keep:
            continue
        staging = name.startswith(".gen-") and name.endswith(".tmp")
        if entry.is_dir() and (GENERATION.fullmatch(name) or staging):
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_file() and (name in (TOKENS, SUFFIXES) or (name.startswith(".") and ".tmp" in name)):
            entry.unlink(missing_ok=True)  # format-1 arrays; temporary files of ours (never the lock)


def orphaned_arrays(path: PathLike) -> bool:
    """True when `path` holds datastore arrays but no header: a store whose write was interrupted by an
    older specdec (format 1 removed its header first). Appending there would lose the store's documents."""
    path = Path(path)
    if not path.is_dir() or (path / HEADER).is_file():
        return False
    return any((path / name).is_file() for name in (TOKENS, SUFFIXES)) or any(
        e.is_dir() and GENERATION.fullmatch(e.name) for e in path.iterdir())
