"""ONNX subgraphs for groupquant's quantized layers (filled in with groupquant.nn)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from torch import nn

from .onnx_weight import SCALE_FORMATS

__all__ = ["QuantLayerOptions", "find_quant_converter"]


@dataclass(frozen=True)
class QuantLayerOptions:
    """Export choices for quantized layers: ``scale_format`` of weight scales ('float32' or 'e8m0')."""

    scale_format: str = "float32"

    def __post_init__(self) -> None:
        if self.scale_format not in SCALE_FORMATS:
            raise ValueError(f"scale_format must be one of {SCALE_FORMATS}, got {self.scale_format!r}")


def find_quant_converter(m: nn.Module) -> Optional[Callable]:
    """The converter for a groupquant quantized layer, or None for any other module."""
    return None
