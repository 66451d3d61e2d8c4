"""specdec's embedded demo pair: a small Llama target and a much smaller draft sharing one BPE tokenizer,
and an EAGLE-3 head for the target.

Trained by `scripts/train_demo_pair.py` on the Python standard library's source; `training.json` beside
this file records sizes, steps, held-out loss and the draft's greedy agreement. The head (``eagle/``) is
trained by `scripts/train_demo_eagle.py`, its record in ``eagle/training.json``. A demo pair, not a real
language model: it makes `specdec demo` run on any machine, offline.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["pair_path"]


def pair_path(name: str) -> Path:
    """Directory of the embedded "target", "draft" (from_pretrained-loadable checkpoints) or "eagle" (the
    target's EAGLE-3 head, for `EagleHead.from_pretrained`)."""
    if name not in ("target", "draft", "eagle"):
        raise ValueError(f"name: expected 'target', 'draft' or 'eagle', got {name!r}")
    path = Path(str(resources.files(__name__))) / name
    if not (path / "config.json").is_file():
        script = "train_demo_eagle.py" if name == "eagle" else "train_demo_pair.py"
        raise FileNotFoundError(f"the embedded demo {name} is missing at {path}; run scripts/{script}")
    return path
