"""What :func:`groupquant.ops.fake_quant_with_scale` returns: dequantized values and their scales."""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["FakeQuantResult"]


@dataclass(frozen=True)
class FakeQuantResult:
    """Fake-quant values and the shared scale of every group, from one pass over the input.

    Fields:
        value: ``fake_quant(x, ...)``: x's shape and dtype, carrying the straight-through gradient.
        scale: float32 shared scales in the contracted scale shape ``S[:d] + (k, 1) + S[d+1:]``
            (:attr:`GroupLayout.scale_shape`); equal to ``quantize(x, ...).scale`` (NaN for a
            group holding NaN/Inf). No gradient.
    """

    value: torch.Tensor
    scale: torch.Tensor
