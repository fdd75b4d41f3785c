"""BiasQuantProxy: quantizes a layer's 1-D bias with its own scale."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from .base import QuantProxy

__all__ = ["BiasQuantProxy"]


class BiasQuantProxy(QuantProxy):
    """Takes ``bias_*`` keywords. A bias has one dim, so groups and channels run along dim 0
    whatever the quantizer says (a weight quantizer may be reused for a bias)."""

    prefix = "bias_"

    def __init__(self, quant: Optional[type], bias_shape: Sequence[int],
                 overrides: Optional[Mapping[str, Any]] = None, context: str = "") -> None:
        super().__init__(quant, overrides, context, (0, 0), bias_shape, force_dims=True)
