"""microxcaling's ``simd_*`` ops: :mod:`groupquant.elementwise`'s ops (``add``, ``sub``, ``mul``,
``div``, ``split``, ``sqrt``, ``pow``, ``exp``, ``log``, ``sum``) run with the rounding kit of
``mx_specs`` and microxcaling's formulas (:func:`.mapping.rounding_kit`), the gradient kit from the
backward specs:

Forward: operands rounded (``q``), then ``q(op(a, b))`` (a non-tensor second operand is used as
given). Backward, each step rounded: add ``dy``; sub ``dy`` / ``-dy``; mul ``dy * b`` / ``dy * a``;
div ``dy / b`` / ``dy * (-y / b)``; a broadcast operand gets the rounded sum of its gradient.
``simd_square``: ``q(q(x)**2)``, backward ``dy * q(2x)``; ``simd_sqrt``: backward ``q(dy * 0.5) / y``;
``simd_exp``: backward ``dy * y``; ``simd_log``: backward ``dy / x``; ``simd_reduce_sum``: the rounded
sum of the rounded input; ``simd_reduce_mean``: that sum times ``1 / n``; ``simd_norm``:
``sqrt(sum(square(x)))``; ``simd_split``: two copies, gradients added.
"""
from __future__ import annotations

import operator
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

import torch

from ... import elementwise as ew
from . import _torch
from .mapping import specs_kit

__all__ = ["simd_add", "simd_sub", "simd_mul", "simd_div", "simd_split", "simd_square", "simd_sqrt", "simd_exp",
           "simd_log", "simd_reduce_sum", "simd_reduce_mean", "simd_norm"]

Operand = Union[torch.Tensor, float]


def _binary(op: str, a: torch.Tensor, b: Operand, mx_specs: Optional[Mapping[str, Any]]) -> torch.Tensor:
    """``a op b`` (``op`` one of add, sub, mul, div) with ``mx_specs`` (plain when None)."""
    if mx_specs is None:
        return getattr(operator, "truediv" if op == "div" else op)(a, b)
    if not isinstance(a, torch.Tensor):
        raise TypeError(f"simd_{op}: the first operand must be a tensor, got {type(a).__name__}")
    return getattr(ew, op)(a, b, precision=specs_kit(mx_specs))


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
    """``op(x)`` (``op`` one of square, sqrt, exp, log) with ``mx_specs`` (plain when None)."""
    if mx_specs is None:
        return {"square": lambda: x * x, "sqrt": lambda: _torch.sqrt(x), "exp": lambda: _torch.exp(x),
                "log": lambda: _torch.log(x)}[op]()
    kit = specs_kit(mx_specs)
    out = ew.pow(x, 2.0, precision=kit) if op == "square" else getattr(ew, op)(x, precision=kit)
    return out if op == "sqrt" else out.to(x.dtype)  # (sqrt in float32, as microxcaling's)


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
    """The dims of a reduction (all of ``x``'s when ``dim`` is None)."""
    if dim is None:
        return list(range(x.ndim))
    return [dim] if isinstance(dim, int) else list(dim)


def simd_reduce_sum(in1: torch.Tensor, dim: Union[int, Sequence[int], None] = None, keepdim: bool = False,
                    mx_specs: Optional[Mapping[str, Any]] = None) -> torch.Tensor:
    """``in1.sum(dim)`` of the rounded input, rounded (all dims when ``dim`` is None)."""
    dims = _dims(in1, dim)
    if mx_specs is None:
        return in1.sum(dims, keepdim=keepdim)
    return ew.sum(in1, dims, keepdim, precision=specs_kit(mx_specs)).to(in1.dtype)


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
    return ew.split(in1, precision=specs_kit(mx_specs))
