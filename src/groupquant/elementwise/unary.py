"""Unary functions in an element precision, forward and backward.

The input is rounded first (x = q(input)); g = q(grad_output); constants such as ln 2 are rounded to
the precision (``c~`` below). The backward reads the input rounded by the gradient kit
(``RoundedMath.for_grad``: the forward's rounding unless the kit says otherwise).

| op         | forward          | backward                                                   |
|------------|------------------|------------------------------------------------------------|
| exp        | y = q(e**x)      | dx = q(g * y)                                              |
| exp2       | y = q(2**x)      | dx = q(q(g * y) * ln2~)                                    |
| log        | y = q(ln x)      | dx = q(g / x)                                              |
| sqrt       | y = q(sqrt x)    | dx = q(q(g / y) * 0.5); microxcaling's formulas: q(q(g * 0.5) / y) |
| rsqrt      | y = q(1/sqrt x)  | t = q(y * y); t = q(t * y); dx = q(q(g * t) * -0.5)        |
| reciprocal | y = q(1 / x)     | t = q(y * y); dx = -q(g * t)                               |
| erf        | y = q(erf x)     | s = q(x * x); e = q(e**-s); t = q(e * (2/sqrt(pi))~); dx = q(g * t) |
| pow(x, p)  | y = q(x**p)      | t = q(x**(p-1)); t = q(t * p~); dx = q(g * t)              |
| cast       | y = q(x)         | dx = g                                                     |
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import RoundedMath, math_for

__all__ = ["exp", "exp2", "log", "sqrt", "rsqrt", "reciprocal", "erf", "pow", "cast"]


def _exp_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    return m.mul(g, y)


def _exp2_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    return m.mul(m.mul(g, y), m.const(math.log(2.0)))


def _log_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    return m.div(g, x)


def _sqrt_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    if m.microxcaling:  # the kit's formulas="microxcaling": q(q(g * 0.5) / y)
        return m.div(m.mul(g, 0.5), y)
    return m.mul(m.div(g, y), 0.5)


def _rsqrt_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    t = m.mul(m.mul(y, y), y)
    return m.mul(m.mul(g, t), -0.5)


def _recip_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    return -m.mul(g, m.mul(y, y))


def _erf_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    e = m.exp(-m.mul(x, x))
    return m.mul(g, m.mul(e, m.const(2.0 / math.sqrt(math.pi))))


def _pow_b(m: RoundedMath, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, p: float) -> torch.Tensor:
    t = m.mul(m.pow(x, p - 1.0), m.const(p))
    return m.mul(g, t)


_FORWARD: Dict[str, Callable[[RoundedMath, torch.Tensor, float], torch.Tensor]] = {
    "exp": lambda m, x, p: m.exp(x), "exp2": lambda m, x, p: m.exp2(x), "log": lambda m, x, p: m.log(x),
    "sqrt": lambda m, x, p: m.sqrt(x), "rsqrt": lambda m, x, p: m.rsqrt(x), "reciprocal": lambda m, x, p: m.recip(x),
    "erf": lambda m, x, p: m.erf(x), "pow": lambda m, x, p: m.pow(x, p), "cast": lambda m, x, p: x,
}
_BACKWARD = {"exp": _exp_b, "exp2": _exp2_b, "log": _log_b, "sqrt": _sqrt_b, "rsqrt": _rsqrt_b,
             "reciprocal": _recip_b, "erf": _erf_b, "pow": _pow_b, "cast": lambda m, x, y, g, p: g}


class _Unary(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, op: str, p: float) -> torch.Tensor:
        y = _FORWARD[op](m, m.q(x), p)
        ctx.m, ctx.op, ctx.p = m.for_grad(), op, p
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        x, y = ctx.saved_tensors
        m = ctx.m
        return _BACKWARD[ctx.op](m, m.q(x), y, m.q(grad), ctx.p), None, None, None


def exp(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(e**q(x))."""
    return _Unary.apply(x, math_for(precision), "exp", 0.0)


def exp2(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(2**q(x))."""
    return _Unary.apply(x, math_for(precision), "exp2", 0.0)


def log(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(ln q(x))."""
    return _Unary.apply(x, math_for(precision), "log", 0.0)


def sqrt(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(sqrt q(x))."""
    return _Unary.apply(x, math_for(precision), "sqrt", 0.0)


def rsqrt(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(1 / sqrt q(x)) with one rounding."""
    return _Unary.apply(x, math_for(precision), "rsqrt", 0.0)


def reciprocal(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(1 / q(x))."""
    return _Unary.apply(x, math_for(precision), "reciprocal", 0.0)


def erf(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(erf q(x))."""
    return _Unary.apply(x, math_for(precision), "erf", 0.0)


def pow(x: torch.Tensor, exponent: float, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(x) ** exponent) for a python-number exponent (a tensor exponent is not supported)."""
    if isinstance(exponent, torch.Tensor) or not isinstance(exponent, (int, float)):
        raise TypeError(f"pow: exponent must be a python number, got {type(exponent).__name__}")
    return _Unary.apply(x, math_for(precision), "pow", float(exponent))


def cast(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(x), and q(grad) backward: a tensor and its gradient rounded to the precision."""
    return _Unary.apply(x, math_for(precision), "cast", 0.0)
