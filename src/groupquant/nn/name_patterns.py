"""Module-name patterns (``include=`` / ``exclude=``): one rule for reading and matching them.

A pattern is a module name as ``named_modules()`` gives it or an ``fnmatch`` pattern
(``"encoder.*"``, ``"*.lm_head"``), matched case-sensitively against the whole name. Conversion
(:func:`groupquant.quantize_model`) and the calibration methods (:mod:`groupquant.calib`) read
their ``include`` / ``exclude`` arguments through this module.
"""
from __future__ import annotations

import fnmatch
from typing import Iterable, List, Optional, Union

__all__ = ["Patterns", "as_patterns", "matches_any"]

#: None (no pattern), one pattern, or several.
Patterns = Union[None, str, Iterable[str]]


def as_patterns(given: Patterns, argument: str) -> Optional[List[str]]:
    """``given`` as a list of patterns (None stays None); a TypeError naming ``argument`` for an
    item that is not a string."""
    if given is None:
        return None
    if isinstance(given, str):
        return [given]
    patterns = list(given)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{argument} must be a module-name pattern or a list of them, got {given!r}")
    return patterns


def matches_any(name: str, patterns: Optional[Iterable[str]]) -> bool:
    """Whether the module name ``name`` matches one of ``patterns`` (none: False)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns or ())
