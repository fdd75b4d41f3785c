"""ActQuantProxy: quantizes an activation (a layer's input or output)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .base import QuantProxy

__all__ = ["ActQuantProxy"]


class ActQuantProxy(QuantProxy):
    """Takes ``input_*`` or ``output_*`` keywords (``prefix``). ``feature_dim`` is the dim the
    layer reduces over for this activation (-1, the features, for linear layers; 1, the channels,
    for convolutions): groups and channels run along it unless the quantizer sets its own dim."""

    def __init__(self, quant: Optional[type], prefix: str = "input_", feature_dim: int = -1,
                 overrides: Optional[Mapping[str, Any]] = None, context: str = "") -> None:
        self.prefix = prefix
        super().__init__(quant, overrides, context, (feature_dim, feature_dim))
