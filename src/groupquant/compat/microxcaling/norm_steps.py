"""The shared steps of LayerNorm, GroupNorm and BatchNorm, rounded in microxcaling's order.

Forward (every step rounded, ``q``): ``mean = q(q(sum x) / n)``; ``shift = q(x - mean)``;
``var = mean(q(shift * shift))``; ``vare = q(var + eps)``; ``inv = q(1 / q(sqrt(vare)))``;
``norm = q(shift * inv)``; ``out = q(q(weight * norm) + bias)``. With running statistics the mean
and variance are the rounded running ones.

Backward: :func:`norm_backward` (GroupNorm, BatchNorm) and :func:`norm_backward_ln` (LayerNorm,
which microxcaling computes from the normalized values and ``vare``, as DeepSpeed does).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch

from ...elementwise.rounded_math import RoundedMath

__all__ = ["NormStats", "norm_forward", "norm_backward", "norm_backward_ln"]


@dataclass
class NormStats:
    """What the forward keeps: the output and the intermediates the backward reads."""

    out: torch.Tensor
    shift: torch.Tensor
    norm: torch.Tensor
    inv: torch.Tensor
    mean: torch.Tensor
    vare: torch.Tensor  # variance + eps, rounded


def _grouped(shape: Sequence[int], axis: int, groups: int) -> List[int]:
    """``shape`` with ``axis`` split into (groups, size // groups)."""
    if shape[axis] % groups:
        raise ValueError(f"num_groups={groups} must divide the {shape[axis]} channels")
    out = list(shape)
    out[axis] = groups
    out.insert(axis + 1, shape[axis] // groups)
    return out


def _param_view(p: Optional[torch.Tensor], ndim: int, axis: Optional[int], size: int) -> Optional[torch.Tensor]:
    """A weight/bias shaped to broadcast along ``axis`` (None stays None)."""
    if p is None or axis is None:
        return p
    shape = [1] * ndim
    shape[axis] = size
    return p.view(shape)


def norm_forward(v: RoundedMath, x: torch.Tensor, axes: List[int], weight: Optional[torch.Tensor],
                 bias: Optional[torch.Tensor], eps: float, groups: Optional[int] = None,
                 weight_axis: Optional[int] = None, running: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                 ) -> NormStats:
    """Normalize ``x`` over ``axes`` (see the module notes); weight/bias None skip their step."""
    orig = list(x.shape)
    w = _param_view(weight, x.ndim, weight_axis, orig[weight_axis] if weight_axis is not None else 0)
    b = _param_view(bias, x.ndim, weight_axis, orig[weight_axis] if weight_axis is not None else 0)
    if groups:
        x = x.view(_grouped(orig, axes[0], groups))
        axes = [a + 1 for a in axes]
    if running is None:
        mean = v.mean(x, axes, keepdim=True)
        shift = v.sub(x, mean)
        vare_base = v.mean(v.mul(shift, shift), axes, keepdim=True)
    else:
        reduced = [1 if (i == 0 or i in axes) else s for i, s in enumerate(x.shape)]
        mean = v.q(running[0]).view(reduced)
        shift = v.sub(x, mean)
        vare_base = v.q(running[1]).view(reduced)
    vare = v.add(vare_base, eps)
    inv = v.recip(v.sqrt(vare))
    norm = v.mul(shift, inv)
    if groups:
        norm = norm.view(orig)
    out = norm if w is None else v.mul(w, norm)
    out = out if b is None else v.add(out, b)
    return NormStats(out, shift, norm, inv, mean, vare)


def norm_backward(v: RoundedMath, g: torch.Tensor, axes: List[int], weight: Optional[torch.Tensor], shift: torch.Tensor,
                  inv: torch.Tensor, groups: Optional[int] = None, weight_axis: Optional[int] = None) -> torch.Tensor:
    """dx of :func:`norm_forward` (GroupNorm / BatchNorm form): ``dx_shift + dx_shift2 + dx_mean``."""
    orig = list(g.shape)
    w = _param_view(weight, g.ndim, weight_axis, orig[weight_axis] if weight_axis is not None else 0)
    dnorm = g if w is None else v.mul(g, w)
    if groups:
        dnorm = dnorm.view(_grouped(orig, axes[0], groups))
        axes = [a + 1 for a in axes]
    dshift = v.mul(dnorm, inv)
    dmean = v.mean(-dshift, axes, keepdim=True)
    dstd = v.mean(v.mul(dnorm, shift), axes, keepdim=True)
    dstd = v.mul(v.mul(dstd, v.mul(inv, inv)), inv)
    dx = v.add(v.add(dshift, v.mul(-dstd, shift)), dmean)
    return dx.view(orig) if groups else dx


def norm_backward_ln(v: RoundedMath, g: torch.Tensor, axes: List[int], weight: Optional[torch.Tensor], norm: torch.Tensor,
                     vare: torch.Tensor) -> torch.Tensor:
    """dx of LayerNorm from the normalized values and ``vare`` (microxcaling's LayerNorm backward)."""
    dnorm = g if weight is None else v.mul(g, weight)
    std = v.sqrt(vare)
    inv = v.div(1.0, std)
    dshift = v.mul(dnorm, inv)
    tmp = v.mean(v.mul(v.mul(dnorm, norm), std), axes, keepdim=True)
    tmp = v.mul(tmp, v.div(1.0, vare))
    dx = v.add(dshift, v.mul(-tmp, norm))
    return v.add(dx, -v.mean(dx, axes, keepdim=True))
