"""The default weight and activation quantizers of each block format by name: the six MX element
formats (``'fp4_e2m1'``, ``'mxfp8'``, ...) and the NVFP4 scheme (``'nvfp4'``)."""
from __future__ import annotations

from typing import Tuple

from ..formats import MX_FORMATS, get_format, get_scheme, known_schemes
from .mx import MX_QUANTIZERS, MXQuantizerPair
from .nvfp4 import NVFP4Act, NVFP4Weight

__all__ = ["BLOCK_FORMATS", "quantizer_pair", "canonical_block_format"]

#: Names of every block format with default quantizers: the MX element formats, then the schemes.
BLOCK_FORMATS: Tuple[str, ...] = tuple(MX_FORMATS) + ("nvfp4",)

_SCHEME_PAIRS = {"nvfp4": MXQuantizerPair(NVFP4Weight, NVFP4Act)}


def canonical_block_format(name: str) -> str:
    """The canonical name of block format ``name`` (``'mxfp4'`` -> ``'fp4_e2m1'``, ``'NVFP4'`` -> ``'nvfp4'``).

    ValueError naming the block formats for anything else."""
    scheme = get_scheme(name)
    if scheme is not None:
        return scheme.name
    listing = f"block formats: {', '.join(BLOCK_FORMATS)}"
    try:
        canonical = get_format(name).name
    except (ValueError, TypeError):
        raise ValueError(f"unknown format {name!r}; {listing}") from None
    if canonical not in MX_QUANTIZERS:
        raise ValueError(f"format {name!r} is not an MX element format or a scheme ({', '.join(known_schemes())}); "
                         f"{listing}")
    return canonical


def quantizer_pair(name: str) -> MXQuantizerPair:
    """The default (weight, act) quantizers of block format ``name`` (an MX format or ``'nvfp4'``)."""
    canonical = canonical_block_format(name)
    return _SCHEME_PAIRS.get(canonical) or MX_QUANTIZERS[canonical]
