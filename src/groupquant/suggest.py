"""Did-you-mean: the one rule for suggesting a known name in place of a misspelled one.

Every error about an unknown name (quantizer settings, layer keywords, recipe slots and names,
format names, microxcaling spec keys, CLI arguments) suggests through :func:`closest`, so a
misspelling gets the same suggestion wherever it is typed. A leaf module: it imports nothing of
groupquant, so every layer may use it.
"""
from __future__ import annotations

import difflib
from typing import Iterable, Optional

__all__ = ["closest", "did_you_mean", "CUTOFF"]

#: Similarity (difflib's ratio, 0..1) a known name needs to be suggested.
CUTOFF = 0.6


def closest(name: str, known: Iterable[str], cutoff: float = CUTOFF) -> Optional[str]:
    """The known name most similar to ``name`` (difflib ratio at least ``cutoff``), or None."""
    match = difflib.get_close_matches(str(name), sorted(set(known)), n=1, cutoff=cutoff)
    return match[0] if match else None


def did_you_mean(name: str, known: Iterable[str], cutoff: float = CUTOFF, prefix: str = "") -> str:
    """``"; did you mean 'x'?"`` for the closest known name (shown with ``prefix``), or ``""``."""
    match = closest(name, known, cutoff)
    return f"; did you mean {prefix + match!r}?" if match is not None else ""
