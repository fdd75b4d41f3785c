"""Named block schemes: an element format, a scale format, a block size and a tensor-scale choice
that other tools ship as one name (NVFP4).

``nvfp4`` (NVIDIA's NVFP4, as TransformerEngine and torchao compute it): FP4 E2M1 elements in
blocks of 16, each block scale an unsigned E4M3 number, and a per-tensor float32 second scale
``g = amax(|x|) / (448 * 6)``. 4 + 8/16 = 4.5 bits per element (plus 32 bits per tensor).
The MX formats need no scheme: their element name (``'mxfp4'``, ``'fp8_e4m3'``, ...) already
implies E8M0 scales over blocks of 32.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from .element import ElementFormat, FloatFormat
from .scale import UE4M3, ScaleFormat

__all__ = ["BlockScheme", "get_scheme", "known_schemes", "NVFP4"]


@dataclass(frozen=True)
class BlockScheme:
    """A named combination of element format, scale format, block size and tensor scale."""

    name: str
    element: ElementFormat
    scale_format: ScaleFormat
    block_size: int
    tensor_scale: bool

    @property
    def bits_per_element(self) -> float:
        """Element bits plus the block scale's share (the per-tensor scale not counted)."""
        return self.element.bit_width + self.scale_format.bit_width / self.block_size


NVFP4 = BlockScheme("nvfp4", FloatFormat(2, 1, name="fp4_e2m1"), UE4M3, 16, True)

_SCHEMES: Dict[str, BlockScheme] = {"nvfp4": NVFP4}


def known_schemes() -> List[str]:
    """Names :func:`get_scheme` knows."""
    return sorted(_SCHEMES)


def get_scheme(name: object) -> Optional[BlockScheme]:
    """The scheme called ``name`` (case-insensitive), or None when ``name`` is not a scheme name."""
    if not isinstance(name, str):
        return None
    return _SCHEMES.get(name.strip().lower())
