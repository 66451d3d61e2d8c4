"""Argument checks shared by the public API: one message shape, NumPy integers accepted where ints are."""

from __future__ import annotations

import numbers

__all__ = ["as_int", "is_int"]


def is_int(value: object) -> bool:
    """True for Python and NumPy integers (numbers.Integral), never for bools."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def as_int(value: object, name: str, low: int | None = None) -> int:
    """`value` as a Python int; ValueError naming `name` when it is not an integer or is below `low`."""
    if not is_int(value) or (low is not None and value < low):
        bound = "" if low is None else f" >= {low}"
        raise ValueError(f"{name}: expected an int{bound}, got {value!r}")
    return int(value)
