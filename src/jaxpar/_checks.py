"""Checks of arguments, and how their messages show values, shared by jaxpar's modules."""

from __future__ import annotations

import numbers
import reprlib

_SHORT = reprlib.Repr(maxstring=60, maxother=200)


def is_whole(value: object) -> bool:
    """Whether ``value`` is an integer, Python's or NumPy's (``np.int64(8)``), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shown(value: object) -> str:
    """``value`` as an error message shows it, with its type unless its repr names it:
    ``None``, ``tuple (8,)``, ``str 'text'``; a long one is cut short."""
    text = _SHORT.repr(value)
    name = type(value).__name__
    return text if value is None or text.startswith(name) else f"{name} {text}"
