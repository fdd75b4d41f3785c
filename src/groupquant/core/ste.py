"""Straight-through estimators: rounding in the forward pass, (clipped) identity in the backward.

``identity``: the gradient passes unchanged through rounding and saturation.
``clipped``:  the gradient is zeroed where the scaled value fell outside the format's range
              (it saturated), which is what lets a learned scale receive the LSQ gradient
              ``round(y) - y`` inside the range and ``+-max`` outside.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..formats import ElementFormat, IntFormat
from ..ops import round_to_format

__all__ = ["STE_MODES", "round_ste", "round_to_format_ste", "format_lowest"]

STE_MODES = ("identity", "clipped")


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


class _RoundToFormatSTE(torch.autograd.Function):
    """:func:`groupquant.ops.round_to_format` with an identity or clipped gradient."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, fmt: ElementFormat, rounding: str,  # type: ignore[override]
                noise: Optional[torch.Tensor], clipped: bool) -> torch.Tensor:
        out = round_to_format(y, fmt, rounding, noise)
        ctx.clipped = clipped
        if clipped:
            ctx.save_for_backward((y >= format_lowest(fmt)) & (y <= fmt.max_normal))
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        if ctx.clipped:
            (inside,) = ctx.saved_tensors
            grad = grad * inside.to(grad.dtype)
        return grad, None, None, None, None


def round_to_format_ste(y: torch.Tensor, fmt: ElementFormat, rounding: str = "even", ste: str = "identity",
                        noise: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Round float32 ``y`` (already divided by its scale) onto ``fmt``'s grid, saturating, with
    a straight-through gradient by ``ste`` (see the module doc). ``noise``: uniform [0, 1) for
    ``rounding='stochastic'``."""
    if ste not in STE_MODES:
        raise ValueError(f"ste must be one of {STE_MODES}, got {ste!r}")
    return _RoundToFormatSTE.apply(y.float(), fmt, rounding, noise, ste == "clipped")
