"""microxcaling's ``simd_*`` ops: element-wise ops whose operands, result and gradients are rounded.

Forward: operands rounded (``q``), then ``q(op(a, b))`` (a non-tensor second operand is used as
given). Backward, each step rounded: add ``dy``; sub ``dy`` / ``-dy``; mul ``dy * b`` / ``dy * a``;
div ``dy / b`` / ``dy * (-y / b)``; a broadcast operand gets the rounded sum of its gradient.
``simd_square``: ``q(q(x)**2)``, backward ``dy * q(2x)``; ``simd_sqrt``: backward ``q(dy * 0.5) / y``;
``simd_exp``: backward ``dy * y``; ``simd_log``: backward ``dy / x``; ``simd_reduce_sum``: the rounded
sum of the rounded input; ``simd_reduce_mean``: that sum times ``1 / n``; ``simd_norm``:
``sqrt(sum(square(x)))``; ``simd_split``: two copies, gradients added.
"""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from ... import elementwise as ew
from . import _torch
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs
from ...elementwise.rounded_math import RoundedMath
from .mapping import rounding_kit

__all__ = ["simd_add", "simd_sub", "simd_mul", "simd_div", "simd_split", "simd_square", "simd_sqrt", "simd_exp",
           "simd_log", "simd_reduce_sum", "simd_reduce_mean", "simd_norm"]

Operand = Union[torch.Tensor, float]


def _unbroadcast(v: RoundedMath, g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``g`` reduced to ``shape`` (the rounded sum over broadcast dims; unchanged when shapes match)."""
    if g.shape == shape:
        return g
    return v.q(v.q(g).sum_to_size(shape))


class _Binary(torch.autograd.Function):
    """``q(op(q(a), q(b)))`` for op in add / sub / mul / div, with microxcaling's backward."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: Operand, op: str, specs: MxSpecs):  # type: ignore[override]
        v = rounding_kit(specs)
        qa = v.q(a)
        is_tensor = isinstance(b, torch.Tensor)
        qb = v.q(b) if is_tensor else b
        out = getattr(v, op)(qa, qb)
        keep_a, keep_b = (qa, qb) if specs["quantize_backprop"] else (a, b)
        ctx.op, ctx.is_tensor, ctx.b = op, is_tensor, None if is_tensor else b
        ctx.shapes = (a.shape, b.shape if is_tensor else None)
        saved = {"add": (), "sub": (), "mul": (keep_a, keep_b) if is_tensor else (keep_a,),
                 "div": (out, keep_b) if is_tensor else (keep_a,)}[op]
        ctx.save_for_backward(*saved)
        ctx.specs = get_backwards_mx_specs(specs)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        v = rounding_kit(ctx.specs)
        op, saved = ctx.op, ctx.saved_tensors
        if not ctx.is_tensor:
            if op in ("add", "sub"):
                return g, None, None, None
            g = v.q(g)
            return (v.mul(g, ctx.b) if op == "mul" else v.div(g, ctx.b)), None, None, None
        shape_a, shape_b = ctx.shapes
        if op == "add":
            g = v.q(g)
            ga, gb = g, g
        elif op == "sub":
            ga, gb = g, v.q(-g)
        elif op == "mul":
            g = v.q(g)
            ga, gb = v.mul(g, saved[1]), v.mul(g, saved[0])
        else:
            g = v.q(g)
            out, b = saved
            ga, gb = v.div(g, b), v.mul(g, v.div(-out, b))
        return _unbroadcast(v, ga, shape_a), _unbroadcast(v, gb, shape_b), None, None


class _Sqrt(torch.autograd.Function):
    """``q(sqrt(q(x)))``, backward ``q(q(dy * 0.5) / y)`` (microxcaling's order)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs):  # type: ignore[override]
        v = rounding_kit(specs)
        out = v.sqrt(v.q(x))
        ctx.save_for_backward(out)
        ctx.specs = get_backwards_mx_specs(specs)
        return out

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        v = rounding_kit(ctx.specs)
        (y,) = ctx.saved_tensors
        return v.div(v.mul(v.q(g), 0.5), y), None


class _Split(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs):  # type: ignore[override]
        ctx.specs = get_backwards_mx_specs(specs)
        ctx.set_materialize_grads(False)
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx, g1: Optional[torch.Tensor], g2: Optional[torch.Tensor]):  # type: ignore[override]
        if g1 is None or g2 is None:
            return (g2 if g1 is None else g1), None
        v = rounding_kit(ctx.specs)
        return v.add(v.q(g1), v.q(g2)), None


def _binary(op: str, a: torch.Tensor, b: Operand, mx_specs: Optional[Mapping[str, Any]]) -> torch.Tensor:
    if mx_specs is None:
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / b}[op]()
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"simd_{op}: the first operand must be a tensor, got {type(a).__name__}")
    return _Binary.apply(a, b, op, apply_mx_specs(mx_specs))


def simd_add(in1: torch.Tensor, in2: Operand, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1 + in2`` rounded (operands too)."""
    return _binary("add", in1, in2, mx_specs)


def simd_sub(in1: torch.Tensor, in2: Operand, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1 - in2`` rounded (operands too)."""
    return _binary("sub", in1, in2, mx_specs)


def simd_mul(in1: torch.Tensor, in2: Operand, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1 * in2`` rounded (operands too)."""
    return _binary("mul", in1, in2, mx_specs)


def simd_div(in1: torch.Tensor, in2: Operand, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1 / in2`` rounded (operands too; ``vec_use_recip`` multiplies by the rounded reciprocal)."""
    return _binary("div", in1, in2, mx_specs)


def _unary(op: str, x: torch.Tensor, mx_specs: Optional[Mapping[str, Any]]) -> torch.Tensor:
    if mx_specs is None:
        return {"square": lambda: x * x, "sqrt": lambda: _torch.sqrt(x), "exp": lambda: _torch.exp(x),
                "log": lambda: _torch.log(x)}[op]()
    specs = apply_mx_specs(mx_specs)
    if op == "sqrt":
        return _Sqrt.apply(x, specs)
    kit = rounding_kit(specs, grad=get_backwards_mx_specs(specs))
    out = ew.pow(x, 2.0, precision=kit) if op == "square" else getattr(ew, op)(x, precision=kit)
    return out.to(x.dtype)


def simd_square(in1: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1 ** 2`` rounded."""
    return _unary("square", in1, mx_specs)


def simd_sqrt(in1: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``sqrt(in1)`` rounded."""
    return _unary("sqrt", in1, mx_specs)


def simd_exp(in1: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``e**in1`` rounded (``vec_use_exp2``: through ``2**x``)."""
    return _unary("exp", in1, mx_specs)


def simd_log(in1: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``log(in1)`` rounded."""
    return _unary("log", in1, mx_specs)


def _dims(x: torch.Tensor, dim: Union[int, Sequence[int], None]) -> List[int]:
    if dim is None:
        return list(range(x.ndim))
    return [dim] if isinstance(dim, int) else list(dim)


def simd_reduce_sum(in1: torch.Tensor, dim: Union[int, Sequence[int], None] = None, keepdim: bool = False,
                    mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1.sum(dim)`` of the rounded input, rounded (all dims when ``dim`` is None)."""
    dims = _dims(in1, dim)
    if mx_specs is None:
        return in1.sum(dims, keepdim=keepdim)
    specs = apply_mx_specs(mx_specs)
    kit = rounding_kit(specs, grad=get_backwards_mx_specs(specs))
    return ew.sum(in1, dims, keepdim, precision=kit).to(in1.dtype)


def simd_reduce_mean(in1: torch.Tensor, dim: Union[int, Sequence[int], None] = None, keepdim: bool = False,
                     mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """The rounded sum times ``1 / n``, rounded (as microxcaling: a multiply, not a divide)."""
    dims = _dims(in1, dim)
    if mx_specs is None:
        return in1.mean(dims, keepdim=keepdim)
    n = 1
    for d in dims:
        n *= in1.shape[d]
    return simd_mul(simd_reduce_sum(in1, dims, keepdim, mx_specs), 1.0 / n, mx_specs)


def simd_norm(in1: torch.Tensor, keepdim: bool = False, mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """Frobenius norm ``sqrt(sum(square(x)))``, each step rounded."""
    if mx_specs is None:
        return torch.linalg.norm(in1, keepdim=keepdim)
    return simd_sqrt(simd_reduce_sum(simd_square(in1, mx_specs), None, keepdim, mx_specs), mx_specs)


def simd_split(in1: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Two uses of ``in1`` whose gradients are added (rounded)."""
    if mx_specs is None:
        return in1, in1
    return _Split.apply(in1, apply_mx_specs(mx_specs))
