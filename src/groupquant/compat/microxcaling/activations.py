"""Activations taking ``mx_specs``, built from rounded vector steps in microxcaling's order.

Every step rounds to the ``bfloat`` / ``fp`` precision (``q``); ``mx_specs`` None is plain torch.

- ``sigmoid(x) = q(1 / q(q(e**-q(x)) + 1))``; backward ``q(q(y * q(1 - y)) * q(dy))``.
- ``tanh(x) = q(tanh(q(x)))``; backward ``q(q(1 - q(y*y)) * q(dy))``.
- ``relu(x) = q(relu(x))``; backward ``q(dy where y > 0)``; ``relu6`` likewise (``0 < y < 6``).
- ``leaky_relu(x) = q(leaky_relu(q(x)))``; backward ``dy`` where ``y > 0`` else ``q(dy * slope)``
  (``dy`` rounded first).
- ``silu(x) = q(q(x) * sigmoid)``, sigmoid as above; backward ``q((s + q(y * q(1 - s))) * q(dy))``.
- ``gelu(x)``: microxcaling's tanh-form approximation ``x * sigmoid(1.59375 * (x + 0.044677734 x**3))``
  (bfloat16 coefficients), or with ``first_order_gelu`` ``x * sigmoid(1.703125 x)``, each product and
  sum rounded; ``approximate`` is accepted and ignored, as there. Backward from the same form.

``inplace=True`` is accepted and computed out of place.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Tuple

import torch

from . import _torch
from .specs import MxSpecs, apply_mx_specs, get_backwards_mx_specs
from ...elementwise.rounded_math import RoundedMath
from .mapping import rounding_kit

__all__ = ["sigmoid", "tanh", "relu", "relu6", "leaky_relu", "silu", "gelu", "Sigmoid", "Tanh", "ReLU", "ReLU6",
           "LeakyReLU", "SiLU", "GELU"]

GELU_CUBIC = 0.044677734      # 0.044715 in bfloat16
GELU_SCALE = 1.59375          # sqrt(8 / pi) in bfloat16
GELU_FIRST_ORDER = 1.703125   # 1.702 in bfloat16
GELU_CUBIC_GRAD = 0.21386719  # 3 * 0.044715 * sqrt(8 / pi) in bfloat16


def _sigmoid(v: RoundedMath, x: torch.Tensor) -> torch.Tensor:
    """``q(1 / q(q(e**-x) + 1))`` (x already rounded)."""
    return v.recip(v.add(v.exp(-x), 1.0))


class _Sigmoid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        y = _sigmoid(rounding_kit(specs), rounding_kit(specs).q(x))
        ctx.save_for_backward(y)
        ctx.specs = get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        return v.mul(v.mul(y, v.sub(1.0, y)), v.q(g)), None


class _Tanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        v = rounding_kit(specs)
        y = v.tanh(v.q(x))
        ctx.save_for_backward(y)
        ctx.specs = get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (y,) = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        return v.mul(v.sub(1.0, v.mul(y, y)), v.q(g)), None


class _ReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        y = rounding_kit(specs).q(_torch.relu(x))
        ctx.save_for_backward(y > 0)
        ctx.specs = get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return rounding_kit(ctx.specs).q(torch.where(mask, g, torch.zeros_like(g))), None


class _ReLU6(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        y = rounding_kit(specs).q(_torch.relu6(x))
        ctx.save_for_backward((y > 0) & (y < 6))
        ctx.specs = get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        return rounding_kit(ctx.specs).q(torch.where(mask, g, torch.zeros_like(g))), None


class _LeakyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, slope: float, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        v = rounding_kit(specs)
        y = v.q(_torch.leaky_relu(v.q(x), slope))
        ctx.save_for_backward(y > 0)
        ctx.slope, ctx.specs = slope, get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        (mask,) = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        return torch.where(mask, g, v.mul(g, ctx.slope)), None, None


class _SiLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs) -> torch.Tensor:  # type: ignore[override]
        v = rounding_kit(specs)
        qx = v.q(x)
        s = _sigmoid(v, qx)
        y = v.mul(qx, s)
        ctx.save_for_backward(y, s)
        ctx.specs = get_backwards_mx_specs(specs)
        return y

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        y, s = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        return v.mul(v.add(s, v.mul(y, v.sub(1.0, s))), g), None


class _GELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, specs: MxSpecs, first_order: bool) -> torch.Tensor:  # type: ignore[override]
        v = rounding_kit(specs)
        qx = v.q(x)
        if first_order:
            arg = v.mul(GELU_FIRST_ORDER, qx)
        else:
            cube = v.mul(v.mul(qx, qx), qx)
            arg = v.mul(GELU_SCALE, v.add(v.mul(GELU_CUBIC, cube), qx))
        phi = _sigmoid(v, arg)
        ctx.save_for_backward(qx if specs["quantize_backprop"] else x, phi)
        ctx.first_order = first_order
        ctx.specs = get_backwards_mx_specs(specs)
        return v.mul(qx, phi)

    @staticmethod
    def backward(ctx, g: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:  # type: ignore[override]
        x, phi = ctx.saved_tensors
        v = rounding_kit(ctx.specs)
        g = v.q(g)
        dphi = v.mul(phi, v.sub(1.0, phi))
        if ctx.first_order:
            dphi = v.mul(GELU_FIRST_ORDER, dphi)
        else:
            dy = v.add(GELU_SCALE, v.mul(GELU_CUBIC_GRAD, v.mul(x, x)))
            dphi = v.mul(dy, dphi)
        return v.mul(v.add(phi, v.mul(x, dphi)), g), None, None


def sigmoid(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.sigmoid`` with ``mx_specs``."""
    return _torch.sigmoid(input) if mx_specs is None else _Sigmoid.apply(input, apply_mx_specs(mx_specs))


def tanh(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.tanh`` with ``mx_specs``."""
    return _torch.tanh(input) if mx_specs is None else _Tanh.apply(input, apply_mx_specs(mx_specs))


def relu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu(input, inplace=inplace)
    return _ReLU.apply(input, apply_mx_specs(mx_specs))


def relu6(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
          name: Optional[str] = None) -> torch.Tensor:
    """``F.relu6`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu6(input, inplace=inplace)
    return _ReLU6.apply(input, apply_mx_specs(mx_specs))


def leaky_relu(input: torch.Tensor, negative_slope: float = 0.01, inplace: bool = False,
               mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``F.leaky_relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.leaky_relu(input, negative_slope, inplace=inplace)
    return _LeakyReLU.apply(input, float(negative_slope), apply_mx_specs(mx_specs))


def silu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.silu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.silu(input, inplace=inplace)
    return _SiLU.apply(input, apply_mx_specs(mx_specs))


def gelu(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
         approximate: Any = None, name: Optional[str] = None) -> torch.Tensor:
    """microxcaling's GELU (tanh form; plain torch ``gelu(approximate='tanh')`` when ``mx_specs`` is None
    and not ``first_order_gelu``)."""
    if mx_specs is None and not first_order_gelu:
        return _torch.gelu(input, approximate="tanh")
    return _GELU.apply(input, apply_mx_specs(mx_specs), bool(first_order_gelu))


class _ActModule(torch.nn.Module):
    """Shared ``mx_specs`` / ``name`` handling of the activation modules."""

    def _init_mx(self, mx_specs: Optional[Mapping[str, Any]], name: Optional[str]) -> None:
        self.name = name
        self.apply_mx_specs(mx_specs)

    def apply_mx_specs(self, mx_specs: Optional[Mapping[str, Any]]) -> None:
        """Replace the settings (None: plain torch)."""
        self.mx_none = mx_specs is None
        self.mx_specs = apply_mx_specs(mx_specs)

    def _specs(self) -> Optional[MxSpecs]:
        return None if self.mx_none else self.mx_specs


class Sigmoid(_ActModule, torch.nn.Sigmoid):
    """``torch.nn.Sigmoid`` taking ``mx_specs``."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__()
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return sigmoid(input, mx_specs=self._specs())


class Tanh(_ActModule, torch.nn.Tanh):
    """``torch.nn.Tanh`` taking ``mx_specs``."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__()
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return tanh(input, mx_specs=self._specs())


class ReLU(_ActModule, torch.nn.ReLU):
    """``torch.nn.ReLU`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return relu(input, self.inplace, mx_specs=self._specs())


class ReLU6(_ActModule, torch.nn.ReLU6):
    """``torch.nn.ReLU6`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return relu6(input, self.inplace, mx_specs=self._specs())


class LeakyReLU(_ActModule, torch.nn.LeakyReLU):
    """``torch.nn.LeakyReLU`` taking ``mx_specs``."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False,
                 mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__(negative_slope, inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return leaky_relu(input, self.negative_slope, self.inplace, mx_specs=self._specs())


class SiLU(_ActModule, torch.nn.SiLU):
    """``torch.nn.SiLU`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return silu(input, self.inplace, mx_specs=self._specs())


class GELU(_ActModule, torch.nn.GELU):
    """``torch.nn.GELU`` taking ``mx_specs`` (microxcaling's tanh form; ``approximate`` ignored)."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
                 approximate: Any = None, name: Optional[str] = None) -> None:
        super().__init__(approximate="tanh")
        self.first_order_gelu = first_order_gelu
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu(input, mx_specs=self._specs(), first_order_gelu=self.first_order_gelu)
