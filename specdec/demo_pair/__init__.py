"""specdec's embedded demo pair: a small Llama target and a much smaller draft sharing one BPE tokenizer.

Trained by `scripts/train_demo_pair.py` on the Python standard library's source; `training.json` beside
this file records sizes, steps, held-out loss and the draft's greedy agreement. A demo pair, not a real
language model: it makes `specdec demo` run on any machine, offline.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["pair_path"]


def pair_path(name: str) -> Path:
    """Directory of the embedded "target" or "draft" (a from_pretrained-loadable checkpoint)."""
    if name not in ("target", "draft"):
        raise ValueError(f"name: expected 'target' or 'draft', got {name!r}")
    path = Path(str(resources.files(__name__))) / name
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"the embedded demo {name} is missing at {path}; run scripts/train_demo_pair.py")
    return path
