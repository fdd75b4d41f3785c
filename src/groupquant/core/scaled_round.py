"""``round_to_format(x / s) * s`` as one autograd function, with gradients to ``x`` and ``s``.

Forward: the format core's rounding and saturation (float32). Backward, recomputed from the
saved input and scale (nothing the size of ``x`` is stored beyond ``x`` itself, which for a
weight is the parameter): with ``y = x / s`` and ``q = round_to_format(y)``,

- ``d out / d x = 1`` (``identity``) or ``1`` inside the format's range and ``0`` where the
  element saturated (``clipped``);
- ``d out / d s = q - y`` inside the range and ``q`` (= +-max) outside (``clipped``, the LSQ
  gradient), or ``q - y`` everywhere (``identity``), summed over the elements sharing ``s``.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..formats import ElementFormat
from ..ops import check_ste, round_to_format
from .ste import format_lowest

__all__ = ["scaled_round"]


class _ScaledRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: torch.Tensor, fmt: ElementFormat, rounding: str,  # type: ignore[override]
                noise: Optional[torch.Tensor], clipped: bool, saturating: bool) -> torch.Tensor:
        out = round_to_format(x.float() / scale, fmt, rounding, noise, saturating) * scale
        ctx.fmt, ctx.rounding, ctx.clipped, ctx.saturating = fmt, rounding, clipped, saturating
        ctx.save_for_backward(x, scale, noise if noise is not None else torch.empty(0))
        ctx.has_noise = noise is not None
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        x, scale, noise = ctx.saved_tensors
        need_x, need_s = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        if not (need_x or need_s):
            return None, None, None, None, None, None, None
        y = x.detach().float() / scale.detach()
        inside = None
        if ctx.clipped:
            inside = (y >= format_lowest(ctx.fmt)) & (y <= ctx.fmt.max_normal)
        grad_x = grad_s = None
        if need_x:
            grad_x = grad if inside is None else grad * inside.to(grad.dtype)
            grad_x = grad_x.to(x.dtype)
        if need_s:
            q = round_to_format(y, ctx.fmt, ctx.rounding, noise if ctx.has_noise else None, ctx.saturating)
            d_scale = q - y if inside is None else torch.where(inside, q - y, q)
            grad_s = (grad.float() * d_scale).sum_to_size(scale.shape).to(scale.dtype)
        return grad_x, grad_s, None, None, None, None, None


def scaled_round(x: torch.Tensor, scale: torch.Tensor, fmt: ElementFormat, rounding: str = "even",
                 ste: str = "identity", noise: Optional[torch.Tensor] = None, saturating: bool = True) -> torch.Tensor:
    """``round_to_format(x / scale, fmt, rounding) * scale`` in float32, cast to ``x``'s dtype.

    ``scale`` (float32) broadcasts against ``x``; gradients as the module doc says. ``noise``:
    uniform [0, 1) of ``x``'s shape for ``rounding='stochastic'``. ``saturating=False``: values
    past max normal become Inf / NaN by the format's rule (see :func:`groupquant.ops.round_to_format`).
    """
    check_ste(ste)
    return _ScaledRound.apply(x, scale, fmt, rounding, noise, ste == "clipped", saturating)
