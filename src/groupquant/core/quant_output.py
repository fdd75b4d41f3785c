"""What a quantize-dequantize module returns: values and scales, kept in the scale's layout."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..ops import GroupLayout
from .granularity import ScaleGranularity

__all__ = ["QuantOutput"]


@dataclass(frozen=True)
class QuantOutput:
    """Result of a core quant module.

    Fields:
        value: dequantized values (``element * scale``) in the input's dtype; contracted
            (``layout.contracted_shape``) for group granularity, else the input's shape.
        scale: the shared scale ``X`` (float32) by which element values on the format's grid
            multiply: 0-d (tensor), keepdim (channel) or ``layout.scale_shape`` (group).
        granularity: how the scale is shared.
        layout: the group layout (group granularity), else None.
    """

    value: torch.Tensor
    scale: torch.Tensor
    granularity: ScaleGranularity
    layout: Optional[GroupLayout] = None
