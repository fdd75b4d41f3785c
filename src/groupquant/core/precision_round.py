"""The ``element_precision`` setting: a tensor rounded to an unscaled minifloat width (bfloat16,
fp16, any ExMy) before the rest of its quantizer runs, with a straight-through gradient.

microxcaling rounds operands to ``bfloat`` before its MX GEMMs; a quantizer with
``element_precision="bfloat16"`` does the same: ``Q(round_to_precision(x))``.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..ops.precision import round_to_precision

__all__ = ["PrecisionThen", "round_to_precision_ste"]


class _RoundSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, precision: Any) -> torch.Tensor:  # type: ignore[override]
        return round_to_precision(x, precision)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):  # type: ignore[override]
        return grad, None


def round_to_precision_ste(x: torch.Tensor, precision: Any) -> torch.Tensor:
    """``round_to_precision(x, precision)`` with an identity (straight-through) gradient."""
    return _RoundSTE.apply(x, precision)


class PrecisionThen(nn.Module):
    """``inner(round_to_precision(x))``: the element precision first, then the quantizer."""

    def __init__(self, precision: Any, inner: nn.Module) -> None:
        super().__init__()
        self.precision = precision
        self.inner = inner

    @property
    def spec(self):
        return self.inner.spec

    def extra_repr(self) -> str:
        return f"element_precision={self.precision.name}"

    def forward(self, x: torch.Tensor, contract: bool = True, codes: bool = False):
        return self.inner(round_to_precision_ste(x, self.precision), contract, codes)
