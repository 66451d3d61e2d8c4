"""ValuSpec calibration: tau from the scores of the target's own greedy trajectories (DESIGN 5).

A branch the target accepts whole is a stretch of its greedy output. So: decode each calibration prompt
greedily with the target, score every window of `window` consecutive new tokens under the scorer (the
mean log-prob of the window's tokens given the prompt and everything before them, exactly what
`BranchScorer` computes for a branch of that length), and take tau = the delta-quantile of those scores:
at least 1 - delta of the windows score >= tau, so the filter keeps (at least) that share of branches
the target would accept, on text like the calibration prompts.

Window rule: windows as long as the branches the filter will judge, all start positions (stride 1),
only whole windows. ``window=None`` takes 10, the length of the retrieval supplier's continuations
(the paper's primary supplier); pass a draft tree's depth when calibrating for a draft supplier.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
import torch
from torch import Tensor
from transformers import PreTrainedModel

__all__ = ["Calibration", "calibrate", "cached_calibration", "window_scores", "threshold", "DEFAULT_WINDOW"]

DEFAULT_WINDOW = 10  # RetrievalSupplier's continuation length
FORMAT = "specdec-valuspec-calibration"
VERSION = 1


@dataclass(frozen=True)
class Calibration:
    """tau (a mean log-prob per token) and how it was obtained; `save`/`load` as JSON."""

    tau: float
    delta: float
    window: int
    target: str
    scorer: str
    num_prompts: int
    num_windows: int
    max_new_tokens: int

    def __post_init__(self) -> None:
        _check(self.__dict__, "calibration")

    def save(self, path: str | Path) -> None:
        from .records import atomic_write_text

        atomic_write_text(path, json.dumps({"format": FORMAT, "version": VERSION, **asdict(self)}, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Calibration":
        """Read a file written by `save`; ValueError naming the file and the field when it is not one."""
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"calibration file {path}: not readable as JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"calibration file {path}: not a ValuSpec calibration (no format {FORMAT!r})")
        if data.get("version") != VERSION:
            raise ValueError(f"calibration file {path}: version {data.get('version')!r}, expected {VERSION}")
        body = {k: v for k, v in data.items() if k not in ("format", "version")}
        _check(body, f"calibration file {path}")
        return cls(**body)


_FIELDS = {"tau": float, "delta": float, "window": int, "target": str, "scorer": str, "num_prompts": int,
           "num_windows": int, "max_new_tokens": int}


def _check(data: dict, where: str) -> None:
    """Field names, types and ranges; ValueError naming the field."""
    missing = sorted(set(_FIELDS) - set(data))
    extra = sorted(set(data) - set(_FIELDS))
    if missing or extra:
        raise ValueError(f"{where}: missing fields {missing}, unknown fields {extra}")
    for name, kind in _FIELDS.items():
        value = data[name]
        ok = isinstance(value, str) if kind is str else (
            isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or float(value).is_integer()))
        if not ok:
            raise ValueError(f"{where}: {name} must be {kind.__name__}, got {value!r}")
    if not math.isfinite(data["tau"]) or data["tau"] > 0:
        raise ValueError(f"{where}: tau must be a finite mean log-prob <= 0, got {data['tau']!r}")
    if not 0 < data["delta"] < 1:
        raise ValueError(f"{where}: delta must lie in (0, 1), got {data['delta']!r}")
    for name in ("window", "num_prompts", "num_windows", "max_new_tokens"):
        if data[name] < 1:
            raise ValueError(f"{where}: {name} must be >= 1, got {data[name]!r}")


def threshold(scores: np.ndarray, delta: float) -> float:
    """tau: the delta-quantile of `scores`, taken as an observed score ("lower"), so that at least
    1 - delta of the scores are >= tau."""
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 1 or scores.size == 0 or not np.isfinite(scores).all():
        raise ValueError(f"scores: expected a non-empty 1-D array of finite numbers, got shape {scores.shape}")
    return float(np.quantile(scores, delta, method="lower"))


@torch.no_grad()
def window_scores(scorer: PreTrainedModel, prompt: list[int], continuation: list[int], window: int) -> np.ndarray:
    """Mean scorer log-prob of every `window`-token stretch of `continuation` given what precedes it.

    One plain forward of the scorer over prompt + continuation; returns [max(0, len - window + 1)] float64.
    """
    ids = torch.tensor([prompt + continuation], dtype=torch.int64, device=scorer.device)
    logits = scorer(input_ids=ids).logits[0, len(prompt) - 1:-1].float()  # [L, V]: predicting each new token
    lp = torch.log_softmax(logits, -1).gather(1, ids[0, len(prompt):, None])[:, 0].double().cpu().numpy()
    sums = np.concatenate([[0.0], np.cumsum(lp)])
    return (sums[window:] - sums[:-window]) / window if lp.size >= window else np.zeros(0)


def _name(model: PreTrainedModel) -> str:
    return str(getattr(model.config, "name_or_path", "") or getattr(model.config, "_name_or_path", "") or
               type(model).__name__)


@torch.no_grad()
def calibrate(target: PreTrainedModel, scorer: PreTrainedModel, prompts: Iterable[list[int] | Tensor], *,
              max_new_tokens: int = 128, window: int | None = None, delta: float = 0.05,
              eos_token_id: int | list[int] | None = None, progress: bool = False,
              outputs: list[list[int]] | None = None) -> Calibration:
    """tau for `ValuSpecFilter` from the target's greedy outputs on `prompts` (token id lists, batch 1 each).

    Decoding uses specdec's own loop with plain AR steps (identical to ``target.generate(do_sample=False)``).
    `outputs`: those greedy continuations when the caller already has them (one per prompt; the benchmark
    also puts them in its datastore), so nothing is decoded again. `progress` shows a tqdm bar. Raises ValueError (before any decoding) on bad arguments, and when no
    window fits (outputs shorter than `window`: raise max_new_tokens or lower window).
    """
    from .generate import SpeculativeGenerator  # lazy: generate imports nothing from here, but keep it light
    from .suppliers.base import ARSupplier

    window = DEFAULT_WINDOW if window is None else window
    for name, value in (("max_new_tokens", max_new_tokens), ("window", window)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name}: expected an int >= 1, got {value!r}")
    if window > max_new_tokens:
        raise ValueError(f"window: {window} tokens exceeds max_new_tokens {max_new_tokens}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(f"delta: expected a number in (0, 1), got {delta!r}")
    prompts = [p.reshape(-1).tolist() if isinstance(p, Tensor) else list(p) for p in prompts]
    if not prompts or any(len(p) == 0 for p in prompts):
        raise ValueError("prompts: expected at least one non-empty token list")
    if outputs is not None and len(outputs) != len(prompts):
        raise ValueError(f"outputs: {len(outputs)} continuations for {len(prompts)} prompts")
    gen = SpeculativeGenerator(target, ARSupplier())
    parts = []
    bar = _progress(len(prompts), progress)
    for i, p in enumerate(prompts):
        if outputs is None:
            ids = torch.tensor([p], dtype=torch.int64, device=target.device)
            out = gen.generate(ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
            new = out.sequences[0, len(p):].tolist()[: out.stats.new_tokens]
        else:
            new = list(outputs[i])
        parts.append(window_scores(scorer, p, new, window))
        bar.update(1)
    bar.close()
    scores = np.concatenate(parts)
    if scores.size == 0:
        raise ValueError(f"prompts: no output reached {window} tokens; raise max_new_tokens or lower window")
    return Calibration(tau=threshold(scores, delta), delta=float(delta), window=window, target=_name(target),
                       scorer=_name(scorer), num_prompts=len(prompts), num_windows=int(scores.size),
                       max_new_tokens=max_new_tokens)


def cached_calibration(target: PreTrainedModel, scorer: PreTrainedModel, prompts: list[list[int]], **settings) -> Calibration:
    """`calibrate(target, scorer, prompts, **settings)`, run once per models' weights, package source, device,
    dtype, prompts and settings (`records.content_key`) and kept under $SPECDEC_CACHE/valuspec (default
    ~/.cache/specdec/valuspec). A cached file that no longer validates is computed again."""
    from .records import cache_file, content_key

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
