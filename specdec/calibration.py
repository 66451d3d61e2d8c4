"""ValuSpec calibration: thresholds from the scores of the target's own greedy trajectories (docs/valuspec.md).

A branch the target accepts whole is a stretch of its greedy output. So: decode each calibration prompt
greedily with the target, score every stretch (window) of d consecutive new tokens under the scorer (the
mean log-prob of the window's tokens given the prompt and everything before them, exactly what
`BranchScorer` computes for a branch of d tokens), and take tau_d = the delta-quantile of those scores:
at least 1 - delta of the d-token windows score >= tau_d, so the filter keeps (at least) that share of
the d-token branches the target would accept, on text like the calibration prompts.

Thresholds by length. A mean over d tokens spreads less the larger d is, so its low quantile rises with d
(HumanEval on the demo pair: tau_4 = -2.98, tau_10 = -2.69, tau_12 = -2.64): one tau calibrated on
10-token windows judges a SMART branch of 2 tokens against a bar set for 10. `calibrate` therefore takes
every length d = 1 .. max_length from the same trajectories (all start positions, stride 1, whole
windows only), and the filter judges a branch (or, under ``unit="prefix"``, a prefix) of d tokens by
tau_d; branches longer than the longest calibrated length take its tau. Worked example, one trajectory
with token log-probs [-1, -3, -2] and delta 0.5: d = 1 windows {-1, -3, -2} give tau_1 = -2; d = 2
windows {-2, -2.5} give tau_2 = -2.5; d = 3, the one window -2, gives tau_3 = -2.

The single threshold of the paper is kept as `Calibration.tau`: tau_window, ``window=None`` meaning 10,
the length of the retrieval supplier's continuations (the paper's primary supplier).

File format: JSON, version 2 (``taus``, ``num_windows`` per length). Version-1 files (one ``tau`` for one
window length) still load, as a calibration with one tau for every length, with a warning.
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from .records import atomic_write_text, cache_file, content_key, model_name, read_json

__all__ = ["Calibration", "calibrate", "cached_calibration", "token_logprobs", "thresholds_by_length", "threshold",
           "DEFAULT_DELTA", "DEFAULT_WINDOW", "MAX_LENGTH"]

DEFAULT_WINDOW = 10  # RetrievalSupplier's continuation length: the paper's single tau
# delta 0.01, not the paper's 0.05: with the default filter (prefix unit, tau by length) 0.05 left 9.1% and 6.6%
# of retrieval trees empty on HumanEval and Spec-Bench, 0.01 3.5% and 3.3%, false discards <= 0.9%
# (bench/results/2026-12-01-cpu-valuspec-lengths/)
DEFAULT_DELTA = 0.01
MAX_LENGTH = 32  # lengths calibrated by default; built-in suppliers' branches are at most 12 tokens (SMART)
FORMAT = "specdec-valuspec-calibration"
VERSION = 2


@dataclass(frozen=True)
class Calibration:
    """Thresholds (mean log-probs per token) by branch length and how they were obtained; `save`/`load`.

    taus: taus[d - 1] is tau_d, the threshold of a d-token branch, d = 1 .. len(taus); longer branches
    take the last one. A single entry is one tau for every length (a version-1 file).
    num_windows: the windows scored for each length. window: the length whose tau is `tau`.
    """

    taus: tuple[float, ...]
    num_windows: tuple[int, ...]
    window: int
    delta: float
    target: str
    scorer: str
    num_prompts: int
    max_new_tokens: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "taus", tuple(self.taus))  # JSON gives lists; keep the instance hashable
        object.__setattr__(self, "num_windows", tuple(self.num_windows))
        _check(self.__dict__, "calibration")

    @property
    def tau(self) -> float:
        """The paper's single threshold: tau at the `window` length."""
        return self.tau_at(self.window)

    @property
    def length_aware(self) -> bool:
        return len(self.taus) > 1

    def tau_at(self, length: int) -> float:
        """tau for a branch of `length` tokens (>= 1; beyond the calibrated lengths: the longest's)."""
        return self.taus[min(length, len(self.taus)) - 1]

    def save(self, path: str | Path) -> None:
        body = {**asdict(self), "taus": list(self.taus), "num_windows": list(self.num_windows)}
        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, **body}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """Read a file written by `save`; ValueError naming the file and the field when it is not one.
        A version-1 file (one tau) loads as one tau for every length, with a warning."""
        data = read_json(path, "calibration file", FORMAT)
        version = data.get("version")
        if version not in (1, VERSION):
            raise ValueError(f"calibration file {path}: version {version!r}, expected 1 or {VERSION}")
        body = {k: v for k, v in data.items() if k not in ("format", "version")}
        if version == 1:
            body = _from_version_1(body, f"calibration file {path}")
        _check(body, f"calibration file {path}")
        if version == 1:
            warnings.warn(f"calibration file {path}: version 1, one tau ({body['taus'][0]:.4f}) for every branch "
                          "length; calibrate again for thresholds by length", stacklevel=2)
        return cls(**body)


_FIELDS = {"taus": list, "num_windows": list, "window": int, "delta": float, "target": str, "scorer": str,
           "num_prompts": int, "max_new_tokens": int}
_V1_FIELDS = {"tau", "delta", "window", "target", "scorer", "num_prompts", "num_windows", "max_new_tokens"}


def _from_version_1(data: dict, where: str) -> dict:
    """A version-1 body (one tau, a window count) as a version-2 body with one entry per list."""
    missing, extra = sorted(_V1_FIELDS - set(data)), sorted(set(data) - _V1_FIELDS)
    if missing or extra:
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {extra}")
    body = {k: v for k, v in data.items() if k not in ("tau", "num_windows")}
    return {**body, "taus": [data["tau"]], "num_windows": [data["num_windows"]]}


def _is_number(value, kind: type) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and (kind is float or float(value).is_integer()))


def _check(data: dict, where: str) -> None:
    """Field names, types and ranges; ValueError naming the field."""
    missing = sorted(set(_FIELDS) - set(data))
    extra = sorted(set(data) - set(_FIELDS))
    if missing or extra:
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {extra}")
    for name, kind in _FIELDS.items():
        value = data[name]
        if kind is list:
            ok = isinstance(value, (list, tuple)) and len(value) > 0
        else:
            ok = isinstance(value, str) if kind is str else _is_number(value, kind)
        if not ok:
            want = "a non-empty list" if kind is list else kind.__name__
            raise ValueError(f"{where}: {name} must be {want}, got {value!r}")
    for d, tau in enumerate(data["taus"], 1):
        if not _is_number(tau, float) or not math.isfinite(tau) or tau > 0:
            raise ValueError(f"{where}: taus[{d - 1}] (tau_{d}) must be a finite mean log-prob <= 0, got {tau!r}")
    if len(data["num_windows"]) != len(data["taus"]):
        raise ValueError(f"{where}: num_windows has {len(data['num_windows'])} entries, taus {len(data['taus'])}")
    for d, count in enumerate(data["num_windows"], 1):
        if not _is_number(count, int) or count < 1:
            raise ValueError(f"{where}: num_windows[{d - 1}] must be an int >= 1, got {count!r}")
    if not 0 < data["delta"] < 1:
        raise ValueError(f"{where}: delta must lie in (0, 1), got {data['delta']!r}")
    for name in ("window", "num_prompts", "max_new_tokens"):
        if data[name] < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {data[name]!r}")


def threshold(scores: np.ndarray, delta: float) -> float:
    """tau: the delta-quantile of `scores`, taken as an observed score ("lower"), so that at least
    1 - delta of the scores are >= tau."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.isfinite(scores).all():
        raise ValueError(f"scores: expected a non-empty 1-D array of finite numbers, got shape {scores.shape}")
    return float(np.quantile(scores, delta, method="lower"))


def thresholds_by_length(logprobs: Sequence[np.ndarray], max_length: int,
                         delta: float) -> tuple[list[float], list[int]]:
    """(taus, counts): tau_d and the number of d-token windows, d = 1 .. the longest length that has windows.

    logprobs: one 1-D array per trajectory, the scorer's log-prob of each new token given all before it.
    A window of d tokens is every stretch ``lp[t : t + d]`` (stride 1, whole windows); its score is its
    mean. Lengths no trajectory reaches are left out (so `taus` may be shorter than `max_length`).
    """
    taus, counts = [], []
    sums = [np.concatenate([[0.0], np.cumsum(np.asarray(lp, dtype=np.float64))]) for lp in logprobs]
    for d in range(1, max_length + 1):
        scores = [(s[d:] - s[:-d]) / d for s in sums if s.size > d]
        if not scores:
            break
        scores = np.concatenate(scores)
        taus.append(threshold(scores, delta))
        counts.append(int(scores.size))
    return taus, counts


@torch.no_grad()
def token_logprobs(scorer: PreTrainedModel, prompt: list[int], continuation: list[int]) -> np.ndarray:
    """The scorer's log-prob of each token of `continuation` given the prompt and the tokens before it.

    One plain forward of the scorer over prompt + continuation; returns [len(continuation)] float64.
    """
    if not continuation:
        return np.zeros(0)
    ids = torch.tensor([prompt + continuation], dtype=torch.int64, device=scorer.device)
    logits = scorer(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # [L, V]: predicting each new token
    return torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt):, None])[:, 0].double().cpu().numpy()


def _name(model: PreTrainedModel) -> str:
    """The checkpoint `model` was loaded from (`records.model_name`), or its class for one built from a config."""
    return model_name(model) or type(model).__name__


def _token_lists(prompts: Iterable[str | list[int] | Tensor],
                 tokenizer: PreTrainedTokenizerBase | None) -> list[list[int]]:
    """Prompts as token id lists: strings through `tokenizer` (special tokens added, as the CLI does)."""
    out = []
    for i, p in enumerate(prompts):
        if isinstance(p, str):
            if tokenizer is None:
                raise TypeError(f"tokenizer: prompt {i} is a string; pass tokenizer= to encode it, or token id lists")
            p = tokenizer(p, add_special_tokens=True).input_ids
        elif isinstance(p, Tensor):
            p = p.reshape(-1).tolist()
        elif isinstance(p, (list, tuple)) and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool)
                                                  for t in p):
            p = [int(t) for t in p]
        else:
            raise TypeError(f"prompts: prompt {i} is a {type(p).__name__}; expected a string, a token id list or "
                            "a 1-D tensor")
        out.append(p)
    return out


@torch.no_grad()
def calibrate(target: PreTrainedModel, scorer: PreTrainedModel, prompts: Iterable[str | list[int] | Tensor], *,
              tokenizer: PreTrainedTokenizerBase | None = None, max_new_tokens: int = 128, window: int | None = None,
              max_length: int | None = None, delta: float = DEFAULT_DELTA, eos_token_id: int | list[int] | None = None,
              progress: bool = False, outputs: list[list[int]] | None = None) -> Calibration:
    """Thresholds by branch length for `ValuSpecFilter` from the target's greedy outputs on `prompts`.

    prompts: strings (encoded by `tokenizer`, special tokens added; a string without a tokenizer is a
    TypeError naming it) or token id lists / 1-D tensors; each is decoded alone (batch 1) with specdec's
    own loop and plain AR steps (identical to ``target.generate(do_sample=False)``). tokenizer: also
    supplies the EOS when `eos_token_id` is None (else the target's generation config does).
    window: the length of the single tau (`Calibration.tau`; None: 10). max_length: the longest branch
    length calibrated (None: min(max_new_tokens, 32); at least `window`); lengths no output reaches are left out.
    `outputs`: those greedy continuations when the caller already has them (one per prompt; the benchmark
    also puts them in its datastore), so nothing is decoded again. `progress` shows a tqdm bar. Raises
    ValueError (before any decoding) on bad arguments, and when no output reaches `window` tokens.
    """
    from .generate import SpeculativeGenerator  # lazy: generate imports nothing from here, but keep it light
    from .suppliers.base import ARSupplier

    window = DEFAULT_WINDOW if window is None else window
    max_length = min(max_new_tokens, MAX_LENGTH) if max_length is None else max_length
    for name, value in (("max_new_tokens", max_new_tokens), ("window", window), ("max_length", max_length)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if window > max_new_tokens:
        raise ValueError(f"window: {window} tokens exceeds max_new_tokens {max_new_tokens}")
    if max_length > max_new_tokens:
        raise ValueError(f"max_length: {max_length} tokens exceeds max_new_tokens {max_new_tokens}")
    max_length = max(max_length, window)
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(f"delta: expected a number in (0, 1), got {delta!r}")
    if tokenizer is not None and not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"tokenizer: expected a Hugging Face tokenizer, got {type(tokenizer).__name__}")
    prompts = _token_lists(prompts, tokenizer)
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts: expected at least one non-empty prompt")
    if outputs is not None and len(outputs) != len(prompts):
        raise ValueError(f"outputs: {len(outputs)} continuations for {len(prompts)} prompts")
    if eos_token_id is None and tokenizer is not None:
        eos_token_id = tokenizer.eos_token_id
    gen = SpeculativeGenerator(target, ARSupplier())
    logprobs = []
    bar = _progress(len(prompts), progress)
    for i, p in enumerate(prompts):
        if outputs is None:
            ids = torch.tensor([p], dtype=torch.int64, device=target.device)
            out = gen.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
            new = out.sequences[0, len(p):].tolist()[: out.stats.new_tokens]
        else:
            new = list(outputs[i])
        logprobs.append(token_logprobs(scorer, p, new))
        bar.update(1)
    bar.close()
    taus, counts = thresholds_by_length(logprobs, max_length, delta)
    if len(taus) < window:
        raise ValueError(f"prompts: no output reached {window} tokens; raise max_new_tokens or lower window")
    return Calibration(taus=tuple(taus), num_windows=tuple(counts), window=window, delta=float(delta),
                       target=_name(target), scorer=_name(scorer), num_prompts=len(prompts),
                       max_new_tokens=max_new_tokens)


def cached_calibration(target: PreTrainedModel, scorer: PreTrainedModel, prompts: list[list[int]], **settings) -> Calibration:
    """`calibrate(target, scorer, prompts, **settings)`, run once per models' weights, package source, device,
    dtype, prompts and settings (`records.content_key`) and kept under $SPECDEC_CACHE/valuspec (default
    ~/.cache/specdec/valuspec). A cached file that no longer validates is computed again."""
    key = content_key("calibration", {"target": target, "scorer": scorer}, device=str(target.device),
                      dtype=str(target.dtype), settings={"prompts": prompts, **settings})
    path = cache_file("valuspec", "calibration", key)
    if path.is_file():
        try:
            return Calibration.load(path)
        except ValueError:
            pass  # a damaged or outdated cache file: calibrate again and overwrite it
    cal = calibrate(target, scorer, prompts, **settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    cal.save(path)
    return cal


def _progress(total: int, show: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="calibrate", unit="prompt", disable=not show)
