"""The command line's argument types and actions: the demo's ``--formats`` (MX formats and block
schemes, aliases to canonical names), ``--recipe`` (a recipe name, did-you-mean on a typo), counts and
seeds; each bad value is a usage error (exit status 2) naming the option."""
from __future__ import annotations

import argparse
from typing import Dict, List, Optional, Sequence

from ..formats import MX_FORMATS, get_format, known_formats, known_schemes
from ..inject import closest


def _suggest(name: str, candidates: Sequence[str]) -> Optional[str]:
    """The candidate closest to ``name`` (case-insensitive), or None when none is close."""
    by_key = {c.lower(): c for c in candidates}
    match = closest(name.strip().lower(), by_key)
    return by_key[match] if match is not None else None


def _mx_format_names() -> Dict[str, str]:
    """Every name ``get_format`` accepts for an MX element format -> its canonical name, and the
    block schemes (``nvfp4``) -> themselves."""
    names = {name: get_format(name).name for name in known_formats() if get_format(name).name in MX_FORMATS}
    names.update({name: name for name in known_schemes()})
    return names


def _split_formats(values: Sequence[str]) -> List[str]:
    """``['fp4_e2m1,int8', 'nvfp4']`` -> the canonical block format names, in order, each once.

    Raises ``argparse.ArgumentTypeError`` naming the first name that is not an MX format or a
    scheme, or saying that no name was given; both messages list the valid names.
    """
    mx_names = _mx_format_names()
    valid = (f"MX formats: {', '.join(MX_FORMATS)}; schemes: {', '.join(known_schemes())} "
             f"(also: {', '.join(sorted(n for n in mx_names if n not in MX_FORMATS and n not in known_schemes()))})")
    names: List[str] = []
    for name in (v.strip() for item in values for v in item.split(",")):
        if not name:
            continue
        canonical = mx_names.get(name.lower())
        if canonical is None:
            if name.lower() in known_formats():
                raise argparse.ArgumentTypeError(f"{name!r} is not an MX element format; {valid}")
            guess = _suggest(name, list(mx_names))
            hint = f" (did you mean {guess!r}?)" if guess else ""
            raise argparse.ArgumentTypeError(f"unknown format {name!r}{hint}; {valid}")
        if canonical not in names:
            names.append(canonical)
    if not names:
        raise argparse.ArgumentTypeError(f"names no format; {valid}")
    return names


class _FormatsAction(argparse.Action):
    """Stores ``--formats`` as checked canonical names (and ``formats_given``); a bad list is a
    usage error (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None):
        try:
            setattr(namespace, self.dest, _split_formats(values))
        except argparse.ArgumentTypeError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None
        namespace.formats_given = True


def _recipe_names() -> List[str]:
    from ..nn import RECIPES

    return list(RECIPES)


class _RecipeAction(argparse.Action):
    """Stores ``--recipe`` as a recipe name; an unknown one is a usage error (exit 2) with a
    did-you-mean and the list of recipes."""

    def __call__(self, parser, namespace, values, option_string=None):
        from ..inject import UnknownSettingError
        from ..nn import recipe

        try:
            setattr(namespace, self.dest, recipe(values.strip()).name)
        except UnknownSettingError as exc:
            raise argparse.ArgumentError(self, str(exc)) from None


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


#: The seeds the demo can use: torch seeds are 64-bit, and the QAT run takes ``seed + 1``.
_SEED_MAX = 2**64 - 2


def _seed(text: str) -> int:
    """A demo seed: an integer in [0, 2**64 - 2] (argparse reports anything else in one line)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if not 0 <= value <= _SEED_MAX:
        raise argparse.ArgumentTypeError(f"must be in [0, 2**64 - 2] (torch seeds are 64-bit), got {value}")
    return value
