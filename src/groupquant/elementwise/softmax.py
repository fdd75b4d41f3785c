"""Softmax in an element precision, forward and backward (microxcaling's SoftmaxFunction steps).

Forward, x = q(input):
  m = max(x);  d = q(x - m);  e = q(exp d);  s = q(sum e);  r = q(1 / s);  y = q(e * r)
  with ``use_exp2=True`` the exponential is taken as a power of two:
  t = q(d * log2(e)~);  e = q(2**t)   (log2(e)~ is log2(e) rounded to the precision)
Backward, g = q(grad_output):
  p = q(g * y);  s = q(sum p);  t = q(g - s);  dx = q(y * t)

``use_exp2`` still computes softmax (base e). microxcaling's ``softmax_exp2`` instead normalises
2**(x - max), a base-2 softmax, and scales its gradient by ln 2; that is not offered here.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import RoundedMath, math_for

__all__ = ["softmax"]


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dim: int, use_exp2: bool) -> torch.Tensor:
        qx = m.q(x)
        d = m.sub(qx, qx.amax(dim, keepdim=True))
        e = m.exp2(m.mul(d, m.const(math.log2(math.e)))) if use_exp2 else m.exp(d)
        y = m.mul(e, m.recip(m.sum(e, dim, keepdim=True)))
        ctx.m, ctx.dim = m, dim
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (y,) = ctx.m, ctx.saved_tensors
        g = m.q(grad)
        s = m.sum(m.mul(g, y), ctx.dim, keepdim=True)
        return m.mul(y, m.sub(g, s)), None, None, None


def softmax(x: torch.Tensor, dim: int = -1, precision: PrecisionLike = "bfloat16", use_exp2: bool = False) -> torch.Tensor:
    """Softmax of ``x`` along ``dim`` with every step rounded (see the module notes); float32 out."""
    if not isinstance(dim, int):
        raise TypeError(f"softmax: dim must be an int, got {dim!r}")
    return _Softmax.apply(x, math_for(precision), dim, bool(use_exp2))
