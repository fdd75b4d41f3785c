"""Binary arithmetic in an element precision, forward and backward: add, sub, mul, div, and the
residual add / mul of a network's skip connections (the same operations under their block names).

Every operand is first rounded to the precision (``q``), every result is rounded. Broadcasting is
allowed; the gradient of a broadcast operand is the rounded sum over the broadcast dims.

| op  | forward            | backward (g = q(grad_output))                       |
|-----|--------------------|-----------------------------------------------------|
| add | y = q(a + b)       | da = g, db = g                                      |
| sub | y = q(a - b)       | da = g, db = -g                                     |
| mul | y = q(a * b)       | da = q(g * b), db = q(g * a)                        |
| div | y = q(a / b)       | da = q(g / b), db = -q(da * y)  (uses y for a / b)  |
"""
from __future__ import annotations

from typing import Any, Tuple

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import Operand, RoundedMath, math_for

__all__ = ["add", "sub", "mul", "div"]


def _tensor(v: Operand, like: torch.Tensor) -> torch.Tensor:
    """A python number as a 0-d float32 tensor (no gradient); tensors pass."""
    return v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float32, device=like.device)


def _grads(m: RoundedMath, ctx: Any, da: torch.Tensor, db: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Input gradients reduced to the operands' shapes (None where not needed)."""
    ga = m.sum_to_shape(da, ctx.shapes[0]) if ctx.needs_input_grad[0] else None
    gb = m.sum_to_shape(db, ctx.shapes[1]) if ctx.needs_input_grad[1] else None
    return ga, gb


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        ctx.m, ctx.shapes = m.for_grad(), (a.shape, b.shape)
        return m.add(m.q(a), m.q(b))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        g = ctx.m.q(grad)
        return (*_grads(ctx.m, ctx, g, g), None)


class _Sub(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        ctx.m, ctx.shapes = m.for_grad(), (a.shape, b.shape)
        return m.sub(m.q(a), m.q(b))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        g = ctx.m.q(grad)
        return (*_grads(ctx.m, ctx, g, -g), None)


class _Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        qa, qb = m.q(a), m.q(b)
        ctx.m, ctx.shapes = m.for_grad(), (a.shape, b.shape)
        ctx.save_for_backward(m.saved(qa, a), m.saved(qb, b))
        return m.mul(qa, qb)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (qa, qb) = ctx.m, ctx.saved_tensors
        g = m.q(grad)
        return (*_grads(m, ctx, m.mul(g, qb), m.mul(g, qa)), None)


class _Div(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath) -> torch.Tensor:
        qb = m.q(b)
        y = m.div(m.q(a), qb)
        ctx.m, ctx.shapes = m.for_grad(), (a.shape, b.shape)
        ctx.save_for_backward(qb, y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (qb, y) = ctx.m, ctx.saved_tensors
        da = m.div(m.q(grad), qb)
        return (*_grads(m, ctx, da, -m.mul(da, y)), None)


def _apply(fn: type, a: Operand, b: Operand, precision: PrecisionLike) -> torch.Tensor:
    """Run a binary Function with python numbers turned into constant tensors."""
    like = a if isinstance(a, torch.Tensor) else b
    if not isinstance(like, torch.Tensor):
        raise TypeError(f"{fn.__name__[1:].lower()} needs at least one tensor operand, got {a!r} and {b!r}")
    return fn.apply(_tensor(a, like), _tensor(b, like), math_for(precision))


def add(a: Operand, b: Operand, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(a) + q(b)); float32 out."""
    return _apply(_Add, a, b, precision)


def sub(a: Operand, b: Operand, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(a) - q(b)); float32 out."""
    return _apply(_Sub, a, b, precision)


def mul(a: Operand, b: Operand, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(a) * q(b)); float32 out."""
    return _apply(_Mul, a, b, precision)


def div(a: Operand, b: Operand, precision: PrecisionLike = "bfloat16") -> torch.Tensor:
    """q(q(a) / q(b)); float32 out."""
    return _apply(_Div, a, b, precision)
