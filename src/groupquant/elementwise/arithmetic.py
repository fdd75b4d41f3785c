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

With the kit's ``formulas="microxcaling"``: a python-number operand is used as given (not rounded)
and the gradient of the tensor beside it is ``grad`` itself for add / sub (unrounded); sub's ``da``
is ``grad`` itself, ``db = q(-grad)``; div's ``db = q(g * q(-y / b))``; a broadcast operand's
gradient is ``q(sum q(g))``; mul / div save the unrounded operands when the gradient kit rounds
nothing (:meth:`RoundedMath.saved`). :func:`split` (two uses of one tensor whose gradients are added
rounded, ``q(q(g1) + q(g2))``; forward: two copies) is microxcaling's ``simd_split``.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch

from ..ops.precision import PrecisionLike
from .rounded_math import Operand, RoundedMath, math_for

__all__ = ["add", "sub", "mul", "div", "split"]

Exact = Tuple[bool, bool]  # which operands are python numbers used as given (microxcaling's formulas)


def _tensor(v: Operand, like: torch.Tensor) -> torch.Tensor:
    """A python number as a 0-d float32 tensor (no gradient); tensors pass."""
    return v if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float32, device=like.device)


def _grads(m: RoundedMath, ctx: Any, da: torch.Tensor, db: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Input gradients reduced to the operands' shapes (None where not needed)."""
    ga = m.sum_to_shape(da, ctx.shapes[0]) if ctx.needs_input_grad[0] else None
    gb = m.sum_to_shape(db, ctx.shapes[1]) if ctx.needs_input_grad[1] else None
    return ga, gb


def _operands(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath, exact: Exact) -> Tuple[torch.Tensor, ...]:
    """(q(a), q(b)), an ``exact`` operand as given; records the gradient kit, shapes and ``exact``."""
    ctx.m, ctx.shapes, ctx.exact = m.for_grad(), (a.shape, b.shape), exact
    return (a.float() if exact[0] else m.q(a)), (b.float() if exact[1] else m.q(b))


class _Add(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath, exact: Exact) -> torch.Tensor:
        return m.add(*_operands(ctx, a, b, m, exact))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        g = grad if any(ctx.exact) else ctx.m.q(grad)
        return (*_grads(ctx.m, ctx, g, g), None, None)


class _Sub(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath, exact: Exact) -> torch.Tensor:
        return m.sub(*_operands(ctx, a, b, m, exact))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m = ctx.m
        if m.microxcaling:
            return (*_grads(m, ctx, grad, -grad if any(ctx.exact) else m.q(-grad)), None, None)
        g = m.q(grad)
        return (*_grads(m, ctx, g, -g), None, None)


class _Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath, exact: Exact) -> torch.Tensor:
        qa, qb = _operands(ctx, a, b, m, exact)
        ctx.save_for_backward(m.saved(qa, a), m.saved(qb, b))
        return m.mul(qa, qb)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (qa, qb) = ctx.m, ctx.saved_tensors
        g = m.q(grad)
        return (*_grads(m, ctx, m.mul(g, qb), m.mul(g, qa)), None, None)


class _Div(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, m: RoundedMath, exact: Exact) -> torch.Tensor:
        qa, qb = _operands(ctx, a, b, m, exact)
        y = m.div(qa, qb)
        ctx.save_for_backward(m.saved(qb, b), y)
        return y

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor):
        m, (qb, y) = ctx.m, ctx.saved_tensors
        da = m.div(m.q(grad), qb)
        db = m.mul(m.q(grad), m.div(-y, qb)) if m.microxcaling else -m.mul(da, y)
        return (*_grads(m, ctx, da, db), None, None)


class _Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, m: RoundedMath) -> Tuple[torch.Tensor, torch.Tensor]:
        ctx.m = m.for_grad()
        ctx.set_materialize_grads(False)
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx: Any, g1: Optional[torch.Tensor], g2: Optional[torch.Tensor]):
        if g1 is None or g2 is None:  # one use only: its gradient as it comes
            return (g2 if g1 is None else g1), None
        return ctx.m.add(ctx.m.q(g1), ctx.m.q(g2)), None


def _apply(fn: type, a: Operand, b: Operand, precision: PrecisionLike) -> torch.Tensor:
    """Run a binary Function with python numbers turned into constant tensors."""
    like = a if isinstance(a, torch.Tensor) else b
    if not isinstance(like, torch.Tensor):
        raise TypeError(f"{fn.__name__[1:].lower()} needs at least one tensor operand, got {a!r} and {b!r}")
    m = math_for(precision)
    exact = (not isinstance(a, torch.Tensor), not isinstance(b, torch.Tensor)) if m.microxcaling else (False, False)
    return fn.apply(_tensor(a, like), _tensor(b, like), m, exact)


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


def split(x: torch.Tensor, precision: PrecisionLike = "bfloat16") -> Tuple[torch.Tensor, torch.Tensor]:
    """Two copies of ``x`` whose gradients are added rounded, ``q(q(g1) + q(g2))`` (one used: its
    gradient as it comes)."""
    return _Split.apply(x, math_for(precision))
