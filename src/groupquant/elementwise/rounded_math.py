"""The basic operations of element-wise arithmetic, each result rounded to an element precision.

:class:`RoundedMath` is the kit the forward and backward formulas of every op in this package (and
of microxcaling's compat ops) are written with (it records no autograd graph). Each method computes
one basic operation and rounds it. The kit's settings (a frozen record, defaults first):

- ``precision``: the :class:`ElementPrecision` every result is rounded to; None rounds nothing
  (plain float32 arithmetic, microxcaling's ``bfloat=0`` / ``fp=0``).
- ``library="float64"``: ``exp, exp2, log, tanh, erf, pow, rsqrt`` are evaluated in float64, rounded
  to float32, then to the precision: the float32 intermediate is then (up to a float64 ulp) the
  correctly rounded value, so the result does not depend on the float32 libm of the device.
  ``"float32"`` evaluates them with torch's float32 kernels, as microxcaling does.
- ``division="divide"``: ``div(a, b) = q(a / b)``; ``"reciprocal"``: ``q(a * q(1 / b))``
  (microxcaling's ``vec_use_recip``). ``mean`` divides by the count with this rule.
- ``exp_via_exp2=False``: with True, ``exp(x) = q(2**q(x * log2(e)~))`` (microxcaling's ``vec_use_exp2``).
- ``accumulate="float64"``: ``sum`` accumulates in float64, rounds to float32, then to the
  precision; ``"float32"`` sums in float32 (torch's order), as microxcaling does.
- ``constants=None``: the precision the kit's own constants (``log2(e)~``, ``ln(2)~``) are rounded
  to; None means ``precision`` (microxcaling rounds them to bfloat16 whatever its precision).
- ``formulas="groupquant"``: where microxcaling's ops use other backward formulas than this
  package's, ``"microxcaling"`` takes theirs (each op's module notes say where): layer norm's
  backward from the normalised values and ``var + eps`` (DeepSpeed's), the full batch-statistics
  backward of a batch norm on running statistics, RMS norm's ``dx1 = g * inv``, ``dx = dx1 - xn *
  mean(dx1 * xn)``, running statistics updated as ``q(q((1 - m) * r) + q(m * s))`` with ``s`` the
  batch mean and ``var + eps``, and operands saved unrounded for a gradient kit that rounds nothing
  (microxcaling's ``quantize_backprop=False``).
- ``grad=None``: the kit every op's backward formulas run with (:meth:`for_grad`); None means this
  kit. microxcaling's ``quantize_backprop=False`` is a gradient kit that rounds nothing. Values an op
  saves for its backward are the forward's (rounded by this kit), except the input of the unary
  functions and of the sigmoid GELU forms, which their backward rounds with the gradient kit.

Always: ``+ - * /`` and ``sqrt`` are computed in float32 (correctly rounded by IEEE), then rounded to
the precision (double rounding float32 -> precision is the definition, as in microxcaling);
``mean`` is ``div(round(sum), n)`` with ``n`` exact, as microxcaling's ``vec_reduce_mean``; ``max``
of rounded values needs no rounding. Python-float constants are used as given in float32
(``const`` rounds one to the precision first). Library functions are called as tensor methods
(``t.exp()``), which microxcaling's ``inject_pyt_ops`` does not replace.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from math import prod
from typing import Callable, Optional, Sequence, Tuple, Union

import torch

from ..ops.precision import ElementPrecision, PrecisionLike, resolve_precision, round_to_precision

__all__ = ["RoundedMath", "Operand", "Dims", "math_for", "LIBRARIES", "DIVISIONS", "ACCUMULATIONS", "FORMULAS"]

LIBRARIES = ("float64", "float32")
FORMULAS = ("groupquant", "microxcaling")
DIVISIONS = ("divide", "reciprocal")
ACCUMULATIONS = ("float64", "float32")

Operand = Union[torch.Tensor, float]
Dims = Optional[Union[int, Sequence[int]]]


#: The first torch whose torch.compile gives these ops' custom backward its gradients: under torch
#: 2.11 the compiled backward of every op here returned zeros (tests/elementwise/test_compile_guard.py).
COMPILED_GRADIENTS_SINCE = (2, 12)
_TORCH = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])


def check_compile_support() -> None:
    """Raised inside torch.compile's tracing of a training step on a torch whose compiled backward
    of these ops is wrong (:data:`COMPILED_GRADIENTS_SINCE`): dynamo then breaks the graph and runs
    the op eagerly (right gradients); with ``fullgraph=True`` the RuntimeError reaches the user.
    Never silent zero gradients."""
    if _TORCH < COMPILED_GRADIENTS_SINCE and torch.compiler.is_compiling() and torch.is_grad_enabled():
        raise RuntimeError(
            f"groupquant's element-wise ops in an emulated precision (a recipe's `elementwise`, "
            f"groupquant.elementwise) get zero gradients when torch {torch.__version__} compiles them, so they "
            f"run outside the compiled graph; fullgraph=True cannot hold them: compile without fullgraph, use "
            f"a recipe with elementwise=None, or torch >= {'.'.join(map(str, COMPILED_GRADIENTS_SINCE))}")


def math_for(precision: "Union[PrecisionLike, RoundedMath]") -> "RoundedMath":
    """The :class:`RoundedMath` of a precision or a precision name (a kit passes through); refuses
    to be compiled for training where torch gets its gradients wrong (:func:`check_compile_support`)."""
    check_compile_support()
    if isinstance(precision, RoundedMath):
        return precision
    return RoundedMath(resolve_precision(precision))


def _f32(v: Operand) -> torch.Tensor:
    """A float32 tensor of ``v`` (a python number becomes a 0-d float32 tensor)."""
    return v.float() if isinstance(v, torch.Tensor) else torch.tensor(float(v), dtype=torch.float32)


@dataclass(frozen=True)
class RoundedMath:
    """Basic operations rounded to ``precision``; float32 tensors in and out (settings: module notes)."""

    precision: Optional[ElementPrecision]
    library: str = "float64"
    division: str = "divide"
    exp_via_exp2: bool = False
    accumulate: str = "float64"
    constants: Optional[ElementPrecision] = None
    grad: Optional["RoundedMath"] = None
    formulas: str = "groupquant"

    def __post_init__(self) -> None:
        for name, allowed in (("library", LIBRARIES), ("division", DIVISIONS), ("accumulate", ACCUMULATIONS),
                              ("formulas", FORMULAS)):
            if getattr(self, name) not in allowed:
                raise ValueError(f"RoundedMath.{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if self.grad is not None and not isinstance(self.grad, RoundedMath):
            raise TypeError(f"RoundedMath.grad must be a RoundedMath or None, got {self.grad!r}")
        if not isinstance(self.exp_via_exp2, bool):
            raise TypeError(f"RoundedMath.exp_via_exp2 must be a bool, got {self.exp_via_exp2!r}")

    def for_grad(self) -> "RoundedMath":
        """The kit of the backward formulas: ``grad``, or this kit when None."""
        return self if self.grad is None else self.grad

    @property
    def microxcaling(self) -> bool:
        """Whether the kit takes microxcaling's formulas (``formulas="microxcaling"``)."""
        return self.formulas == "microxcaling"

    def saved(self, rounded: torch.Tensor, given: Operand) -> Operand:
        """The operand an op saves for its backward: ``rounded`` (the forward's), or with
        microxcaling's formulas and a gradient kit that rounds nothing, ``given``."""
        return given if self.microxcaling and self.for_grad().precision is None else rounded

    def with_settings(self, **settings: object) -> "RoundedMath":
        """A copy with some settings changed (checked as at construction)."""
        return replace(self, **settings)

    def q(self, x: Operand) -> torch.Tensor:
        """``x`` rounded to the precision (float32); float32 ``x`` itself when the precision is None."""
        if self.precision is None:
            return _f32(x)
        return round_to_precision(_f32(x), self.precision)

    def const(self, c: float) -> float:
        """A python constant rounded to the constants' precision (e.g. ln 2 in bfloat16)."""
        p = self.precision if self.constants is None else self.constants
        return c if p is None else float(round_to_precision(_f32(c), p))

    def add(self, a: Operand, b: Operand) -> torch.Tensor:
        """round(a + b)."""
        return self.q(_f32(a) + _f32(b))

    def sub(self, a: Operand, b: Operand) -> torch.Tensor:
        """round(a - b)."""
        return self.q(_f32(a) - _f32(b))

    def mul(self, a: Operand, b: Operand) -> torch.Tensor:
        """round(a * b)."""
        return self.q(_f32(a) * _f32(b))

    def div(self, a: Operand, b: Operand) -> torch.Tensor:
        """round(a / b); with ``division="reciprocal"`` round(a * round(1 / b))."""
        if self.division == "reciprocal":
            return self.mul(a, self.recip(b))
        return self.q(_f32(a) / _f32(b))

    def recip(self, x: Operand) -> torch.Tensor:
        """round(1 / x)."""
        return self.q(1.0 / _f32(x))

    def sqrt(self, x: Operand) -> torch.Tensor:
        """round(sqrt(x))."""
        return self.q(_f32(x).sqrt())

    def _via64(self, fn: Callable[[torch.Tensor], torch.Tensor], x: Operand) -> torch.Tensor:
        """round(float32(fn(float64 x))), or round(fn(float32 x)) with ``library="float32"``."""
        if self.library == "float32":
            return self.q(fn(_f32(x)))
        return self.q(fn(_f32(x).double()).float())

    def exp(self, x: Operand) -> torch.Tensor:
        """round(e**x); with ``exp_via_exp2`` round(2**round(x * log2(e)~))."""
        if self.exp_via_exp2:
            return self.exp2(self.mul(x, self.const(math.log2(math.e))))
        return self._via64(torch.Tensor.exp, x)

    def exp2(self, x: Operand) -> torch.Tensor:
        """round(2**x)."""
        return self._via64(torch.Tensor.exp2, x)

    def log(self, x: Operand) -> torch.Tensor:
        """round(ln x)."""
        return self._via64(torch.Tensor.log, x)

    def tanh(self, x: Operand) -> torch.Tensor:
        """round(tanh x)."""
        return self._via64(torch.Tensor.tanh, x)

    def erf(self, x: Operand) -> torch.Tensor:
        """round(erf x)."""
        return self._via64(torch.Tensor.erf, x)

    def rsqrt(self, x: Operand) -> torch.Tensor:
        """round(1 / sqrt(x)), one rounding (a single basic operation)."""
        return self._via64(lambda v: 1.0 / v.sqrt(), x)

    def pow(self, x: Operand, exponent: float) -> torch.Tensor:
        """round(x ** exponent) for a python-number exponent."""
        return self._via64(lambda v: v.pow(float(exponent)), x)

    def sum(self, x: torch.Tensor, dims: Dims = None, keepdim: bool = False) -> torch.Tensor:
        """round(sum of x over dims), accumulated in float64 or float32 (``accumulate``; all dims when None)."""
        acc = x.double() if self.accumulate == "float64" else x.float()
        s = acc.sum() if dims is None else acc.sum(dim=_dims(dims, x.dim()), keepdim=keepdim)
        if dims is None and keepdim:
            s = s.reshape([1] * x.dim())
        return self.q(s.float())

    def mean(self, x: torch.Tensor, dims: Dims = None, keepdim: bool = False) -> torch.Tensor:
        """round(round(sum over dims) / n), n the number of elements summed (exact)."""
        return self.div(self.sum(x, dims, keepdim), float(count(x.shape, dims)))

    def sum_to_shape(self, g: torch.Tensor, shape: torch.Size) -> torch.Tensor:
        """A gradient of a broadcast operand: ``g`` summed (rounded) over the broadcast dims to ``shape``;
        ``g`` itself when the shapes agree."""
        if g.shape == shape:
            return g
        if self.microxcaling:  # microxcaling rounds the gradient before the sum
            g = self.q(g)
        lead = g.dim() - len(shape)
        dims = tuple(range(lead)) + tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)
        return self.sum(g, dims, keepdim=True).reshape(shape) if dims else g.reshape(shape)


def _dims(dims: Dims, ndim: int) -> Tuple[int, ...]:
    """``dims`` as a tuple of non-negative ints (all dims when None)."""
    if dims is None:
        return tuple(range(ndim))
    return tuple(d % ndim for d in ((dims,) if isinstance(dims, int) else dims))


def count(shape: torch.Size, dims: Dims) -> int:
    """How many elements a reduction over ``dims`` of ``shape`` combines."""
    return prod(shape[d] for d in _dims(dims, len(shape))) if len(shape) else 1


def expand_back(g: torch.Tensor, shape: torch.Size, dims: Dims, keepdim: bool) -> torch.Tensor:
    """A reduced gradient broadcast back to the input ``shape`` (re-inserting the reduced dims)."""
    if not keepdim:
        for d in sorted(_dims(dims, len(shape))):
            g = g.unsqueeze(d)
    return g.expand(shape)
