"""Activations in an element precision, forward and backward.

x = q(input), g = q(grad_output); ``c~`` is a constant rounded to the precision.

- sigmoid: e = q(exp(-x)); p = q(e + 1); y = q(1 / p).
  backward: t = q(1 - y); t = q(y * t); dx = q(g * t)
- silu: s = sigmoid steps above; y = q(x * s).
  backward: t = q(1 - s); t = q(y * t); t = q(s + t); dx = q(g * t)       [silu' = s + y (1 - s)]
- tanh: y = q(tanh x).  backward: t = q(y * y); t = q(1 - t); dx = q(g * t)
- relu: y = max(x, 0) (exact).  backward: dx = g where x > 0, else 0
- relu6: y = min(max(x, 0), 6) (exact).  backward: dx = g where 0 < y < 6, else 0
- leaky_relu: y = q(x if x > 0 else x * slope).  backward: dx = g where y > 0, else q(g * slope)
- gelu ("none", exact): u = q(x * (1/sqrt 2)~); e = q(erf u); p = q(e + 1); h = q(p * 0.5); y = q(x * h).
  backward: s = q(x * x); s = q(s * -0.5); e = q(exp s); d = q(e * (1/sqrt(2 pi))~); d = q(x * d);
            d = q(h + d); dx = q(g * d)                          [gelu' = Phi(x) + x phi(x)]
- gelu ("tanh"): c = q(x * x); c = q(c * x); c = q(c * 0.044715~); u = q(x + c); u = q(u * sqrt(2/pi)~);
  t = q(tanh u); p = q(t + 1); h = q(p * 0.5); y = q(x * h).
  backward: s = q(t * t); s = q(1 - s); v = q(x * x); v = q(v * 0.134145~); v = q(v + 1);
            v = q(v * sqrt(2/pi)~); d = q(s * v); d = q(d * x); d = q(d * 0.5); d = q(h + d); dx = q(g * d)
- gelu ("sigmoid", microxcaling's: the tanh form as x sigmoid(2u)): c = q(x * x); c = q(c * x);
  c = q(0.044715~ * c); u = q(c + x); a = q(sqrt(8/pi)~ * u); p = sigmoid(a) (steps above); y = q(x * p).
  backward, x~ = the input rounded by the gradient kit: s = q(1 - p); s = q(p * s);
  v = q(x~ * x~); v = q((3 * 0.044715 * sqrt(8/pi))~ * v); v = q(sqrt(8/pi)~ + v); s = q(v * s);
  d = q(x~ * s); d = q(p + d); dx = q(d * g)
- gelu ("quick", x sigmoid(1.702 x)): a = q(1.702~ * x); p, y as "sigmoid".
  backward: s = q(1 - p); s = q(p * s); s = q(1.702~ * s); d = q(x~ * s); d = q(p + d); dx = q(d * g)
"""
from __future__ import annotations

import math
from typing import Any, Tuple

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import RoundedMath, math_for

__all__ = ["sigmoid", "silu", "tanh", "relu", "relu6", "leaky_relu", "gelu", "GELU_APPROXIMATIONS"]

GELU_APPROXIMATIONS = ("none", "tanh", "sigmoid", "quick")
_GELU_CUBIC = 0.044715
_GELU_SCALE = math.sqrt(8.0 / math.pi)
_GELU_QUICK = 1.702


def _sigmoid(m: RoundedMath, x: torch.Tensor) -> torch.Tensor:
    """q(1 / q(q(exp(-x)) + 1))."""
    return m.recip(m.add(m.exp(-x), 1.0))


class _Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        y = _sigmoid(m, m.q(x))
        ctx.m = m.for_grad()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (y,) = ctx.m, ctx.saved_tensors
        return m.mul(m.q(grad), m.mul(y, m.sub(1.0, y))), None


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        qx = m.q(x)
        s = _sigmoid(m, qx)
        y = m.mul(qx, s)
        ctx.m = m.for_grad()
        ctx.save_for_backward(s, y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (s, y) = ctx.m, ctx.saved_tensors
        d = m.add(s, m.mul(y, m.sub(1.0, s)))
        return m.mul(m.q(grad), d), None


class _Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        y = m.tanh(m.q(x))
        ctx.m = m.for_grad()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (y,) = ctx.m, ctx.saved_tensors
        return m.mul(m.q(grad), m.sub(1.0, m.mul(y, y))), None


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        qx = m.q(x)
        ctx.m = m.for_grad()
        ctx.save_for_backward(qx > 0)
        return torch.where(qx > 0, qx, torch.where(torch.isnan(qx), qx, torch.zeros_like(qx)))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        (positive,) = ctx.saved_tensors
        g = ctx.m.q(grad)
        return torch.where(positive, g, torch.zeros_like(g)), None


def _gelu_erf(m: RoundedMath, x: torch.Tensor) -> torch.Tensor:
    """h = Phi(x) = q(q(q(erf(q(x / sqrt 2))) + 1) * 0.5)."""
    u = m.mul(x, m.const(1.0 / math.sqrt(2.0)))
    return m.mul(m.add(m.erf(u), 1.0), 0.5)


def _gelu_tanh(m: RoundedMath, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(h, t): h = q(q(t + 1) * 0.5), t = q(tanh(q(sqrt(2/pi) (x + 0.044715 x**3))))."""
    c = m.mul(m.mul(m.mul(x, x), x), m.const(_GELU_CUBIC))
    t = m.tanh(m.mul(m.add(x, c), m.const(math.sqrt(2.0 / math.pi))))
    return m.mul(m.add(t, 1.0), 0.5), t


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, approximate: str) -> torch.Tensor:
        qx = m.q(x)
        h, t = (_gelu_erf(m, qx), qx) if approximate == "none" else _gelu_tanh(m, qx)
        ctx.m, ctx.approximate = m.for_grad(), approximate
        ctx.save_for_backward(qx, h, t)
        return m.mul(qx, h)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (x, h, t) = ctx.m, ctx.saved_tensors
        if ctx.approximate == "none":
            e = m.exp(m.mul(m.mul(x, x), -0.5))
            d = m.mul(x, m.mul(e, m.const(1.0 / math.sqrt(2.0 * math.pi))))
        else:
            s = m.sub(1.0, m.mul(t, t))
            v = m.add(m.mul(m.mul(x, x), m.const(3.0 * _GELU_CUBIC)), 1.0)
            v = m.mul(v, m.const(math.sqrt(2.0 / math.pi)))
            d = m.mul(m.mul(m.mul(s, v), x), 0.5)
        return m.mul(m.q(grad), m.add(h, d)), None, None


class _ReLU6(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        y = m.q(x).clamp(0.0, 6.0)
        ctx.m = m.for_grad()
        ctx.save_for_backward((y > 0) & (y < 6))
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        (inside,) = ctx.saved_tensors
        g = ctx.m.q(grad)
        return torch.where(inside, g, torch.zeros_like(g)), None


class _LeakyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, slope: float) -> torch.Tensor:
        qx = m.q(x)
        y = torch.where(qx > 0, qx, m.mul(qx, slope))
        ctx.m, ctx.slope = m.for_grad(), slope
        ctx.save_for_backward(y > 0)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        (positive,) = ctx.saved_tensors
        m = ctx.m
        g = m.q(grad)
        return torch.where(positive, g, m.mul(g, ctx.slope)), None, None


class _SigmoidGELU(torch.autograd.Function):
    """GELU as x * sigmoid(a(x)): ``quick`` a = 1.702 x, else a = sqrt(8/pi) (x + 0.044715 x**3)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath, quick: bool) -> torch.Tensor:
        qx = m.q(x)
        if quick:
            a = m.mul(m.const(_GELU_QUICK), qx)
        else:
            c = m.mul(m.const(_GELU_CUBIC), m.mul(m.mul(qx, qx), qx))
            a = m.mul(m.const(_GELU_SCALE), m.add(c, qx))
        p = _sigmoid(m, a)
        ctx.m, ctx.quick = m.for_grad(), quick
        ctx.save_for_backward(x, p)
        return m.mul(qx, p)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (x, p) = ctx.m, ctx.saved_tensors
        x = m.q(x)
        s = m.mul(p, m.sub(1.0, p))
        if ctx.quick:
            s = m.mul(m.const(_GELU_QUICK), s)
        else:
            v = m.mul(m.const(3.0 * _GELU_CUBIC * _GELU_SCALE), m.mul(x, x))
            s = m.mul(m.add(m.const(_GELU_SCALE), v), s)
        return m.mul(m.add(p, m.mul(x, s)), m.q(grad)), None, None


def sigmoid(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """Logistic sigmoid, every step rounded (module notes); float32 out."""
    return _Sigmoid.apply(x, math_for(precision))


def silu(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """x * sigmoid(x), every step rounded; float32 out."""
    return _SiLU.apply(x, math_for(precision))


def tanh(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(tanh q(x)); float32 out."""
    return _Tanh.apply(x, math_for(precision))


def relu(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """max(q(x), 0) (NaN stays NaN); float32 out."""
    return _ReLU.apply(x, math_for(precision))


def relu6(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """min(max(q(x), 0), 6); float32 out."""
    return _ReLU6.apply(x, math_for(precision))


def leaky_relu(x: torch.Tensor, negative_slope: float = 0.01, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(x) where positive, else q(q(x) * negative_slope); float32 out."""
    if not isinstance(negative_slope, (int, float)) or isinstance(negative_slope, bool):
        raise TypeError(f"leaky_relu: negative_slope must be a number, got {negative_slope!r}")
    return _LeakyReLU.apply(x, math_for(precision), float(negative_slope))


def gelu(x: torch.Tensor, approximate: str = "none", precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """GELU, exact erf form (``approximate="none"``) or tanh form (``"tanh"``), as torch's, or the
    sigmoid forms ``"sigmoid"`` (microxcaling's) and ``"quick"`` (x sigmoid(1.702 x)); every step rounded."""
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"gelu: approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    if approximate in ("sigmoid", "quick"):
        return _SigmoidGELU.apply(x, math_for(precision), approximate == "quick")
    return _GELU.apply(x, math_for(precision), approximate)
