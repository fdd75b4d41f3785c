"""Softmax in an element precision, forward and backward: the one softmax order of groupquant
(the element-wise ops of recipes and microxcaling's compat ``softmax`` both run it).

Forward, x = q(input), every step rounded by the rounding kit (:class:`RoundedMath`):
  m = max(x);  d = q(x - m);  e = q(exp d);  s = q(sum e);  y = div(e, s)
- ``div`` is the kit's division rule: ``q(e * q(1 / s))`` (``division="reciprocal"``, the default of
  :func:`softmax` given a precision) or ``q(e / s)`` (``"divide"``, microxcaling without ``vec_use_recip``);
- ``exp`` is the kit's: ``use_exp2=True`` (the kit's ``exp_via_exp2``) takes it as a power of two,
  t = q(d * log2(e)~); e = q(2**t), still a softmax of base e;
- ``base2=True`` (microxcaling's ``softmax_exp2``) normalises e = q(2**d) instead: a base-2 softmax.
Backward, with the kit's gradient kit (``RoundedMath.for_grad``), g = q(grad_output):
  p = q(g * y);  s = q(sum p);  t = q(g - s);  dx = q(y * t);  with ``base2``: dx = q(dx * ln(2)~)
"""
from __future__ import annotations

import math
from typing import Any, Union

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import RoundedMath, check_compile_support, math_for

__all__ = ["softmax"]


class _Softmax(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, dim: int, base2: bool) -> torch.Tensor:
        qx = m.q(x)
        d = m.sub(qx, qx.amax(dim, keepdim=True))
        e = m.exp2(d) if base2 else m.exp(d)
        y = m.div(e, m.sum(e, dim, keepdim=True))
        ctx.m, ctx.dim, ctx.base2 = m.for_grad(), dim, base2
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (y,) = ctx.m, ctx.saved_tensors
        g = m.q(grad)
        s = m.sum(m.mul(g, y), ctx.dim, keepdim=True)
        dx = m.mul(y, m.sub(g, s))
        if ctx.base2:
            dx = m.mul(dx, m.const(math.log(2.0)))
        return dx, None, None, None


def softmax(x: torch.Tensor, dim: int = -1, precision: Union[PrecisionLike, RoundedMath] = "bfloat16",
            use_exp2: bool = False, base2: bool = False) -> torch.Tensor:
    """Softmax of ``x`` along ``dim`` with every step rounded (see the module notes); float32 out.

    ``precision``: a precision (name), whose kit divides by reciprocal multiplication, or a
    :class:`RoundedMath` used with its own settings (its gradient kit included)."""
    if not isinstance(dim, int):
        raise TypeError(f"softmax: dim must be an int, got {dim!r}")
    check_compile_support()
    m = precision if isinstance(precision, RoundedMath) else math_for(precision).with_settings(division="reciprocal")
    if use_exp2:
        m = m.with_settings(exp_via_exp2=True)
    return _Softmax.apply(x, m, dim, bool(base2))
