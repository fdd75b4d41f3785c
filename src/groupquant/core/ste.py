"""Straight-through estimators: rounding in the forward pass, (clipped) identity in the backward.

``identity``: the gradient passes unchanged through rounding and saturation.
``clipped``:  the gradient is zeroed where the scaled value fell outside the format's range
              (it saturated), which is what lets a learned scale receive the LSQ gradient
              ``round(y) - y`` inside the range and ``+-max`` outside.
"""
from __future__ import annotations

import torch

from ..formats import ElementFormat, IntFormat
from ..ops import STE_MODES

__all__ = ["STE_MODES", "round_ste", "format_lowest"]


def format_lowest(fmt: ElementFormat) -> float:
    """The most negative element value of ``fmt`` (0 for unsigned formats)."""
    if isinstance(fmt, IntFormat):
        return fmt.qmin * 2.0 ** -fmt.frac_bits
    return -fmt.max_normal if fmt.signed else 0.0


class _RoundSTE(torch.autograd.Function):
    """round-half-to-even forward, identity backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        return grad


def round_ste(x: torch.Tensor) -> torch.Tensor:
    """``torch.round(x)`` (ties to even) with a straight-through (identity) gradient."""
    return _RoundSTE.apply(x)
