"""WeightQuantProxy: quantizes a layer's weight (``[O, I, ...]``)."""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from .base import QuantProxy

__all__ = ["WeightQuantProxy"]


class WeightQuantProxy(QuantProxy):
    """Takes ``weight_*`` keywords. The weight's shape sizes learned per-channel / per-group
    scales ([O, 1, ...] / [O, k, 1, ...]); the quantizer's dims default to groups along dim 1
    (input features) and channels along dim 0."""

    prefix = "weight_"

    def __init__(self, quant: Optional[type], weight_shape: Sequence[int],
                 overrides: Optional[Mapping[str, Any]] = None, context: str = "") -> None:
        super().__init__(quant, overrides, context, {"group_dim": 1, "channel_dim": 0}, weight_shape)
