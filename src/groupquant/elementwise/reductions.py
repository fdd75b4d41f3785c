"""Reductions in an element precision, forward and backward: sum, mean, max.

x = q(input), g = q(grad_output) broadcast back over the reduced dims.

| op   | forward                                     | backward                            |
|------|---------------------------------------------|-------------------------------------|
| sum  | y = q(sum x) (float64 accumulation)         | dx = g                              |
| mean | y = q(q(sum x) / n)                         | dx = q(g / n)                       |
| amax | y = max x (exact)                           | dx = g at the first maximum, else 0 |
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import Dims, RoundedMath, count, expand_back, math_for

__all__ = ["sum", "mean", "amax"]


class _Sum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dims: Dims, keepdim: bool, average: bool) -> torch.Tensor:
        ctx.m, ctx.dims, ctx.keepdim, ctx.average, ctx.shape = m.for_grad(), dims, keepdim, average, x.shape
        qx = m.q(x)
        return m.mean(qx, dims, keepdim) if average else m.sum(qx, dims, keepdim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m = ctx.m
        g = m.q(grad)
        if ctx.average:
            g = m.div(g, float(count(ctx.shape, ctx.dims)))
        if ctx.dims is None and not ctx.keepdim:
            return g.expand(ctx.shape), None, None, None, None
        return expand_back(g, ctx.shape, ctx.dims, ctx.keepdim), None, None, None, None


class _Max(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dim: Optional[int], keepdim: bool) -> torch.Tensor:
        qx = m.q(x)
        flat = qx.reshape(-1) if dim is None else qx
        values, index = torch.max(flat, dim=0 if dim is None else dim, keepdim=True)
        ctx.m, ctx.dim, ctx.shape = m.for_grad(), dim, x.shape
        ctx.save_for_backward(index)
        if dim is None:
            return values.reshape([1] * x.dim()) if keepdim else values.reshape(())
        return values if keepdim else values.squeeze(dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        g = ctx.m.q(grad)
        if ctx.dim is None:
            dx = torch.zeros(ctx.shape.numel(), dtype=g.dtype, device=g.device)
            return dx.scatter(0, index, g.reshape(1)).reshape(ctx.shape), None, None, None
        g = g if g.dim() == len(ctx.shape) else g.unsqueeze(ctx.dim)
        dx = torch.zeros(ctx.shape, dtype=g.dtype, device=g.device)
        return dx.scatter(ctx.dim, index, g), None, None, None


def sum(x: torch.Tensor, dim: Dims = None, keepdim: bool = False, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(sum of q(x) over dim), accumulated in float64 (all dims when None)."""
    return _Sum.apply(x, math_for(precision), dim, keepdim, False)


def mean(x: torch.Tensor, dim: Dims = None, keepdim: bool = False, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(sum of q(x)) / n)."""
    return _Sum.apply(x, math_for(precision), dim, keepdim, True)


def amax(x: torch.Tensor, dim: Optional[int] = None, keepdim: bool = False,
         precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """max of q(x) over one dim (or all); the gradient goes to the first maximum, as torch.max(dim)."""
    if dim is not None and not isinstance(dim, int):
        raise TypeError(f"amax: dim must be an int or None, got {dim!r}")
    return _Max.apply(x, math_for(precision), dim, keepdim)
