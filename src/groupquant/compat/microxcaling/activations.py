"""Activations taking ``mx_specs``: :mod:`groupquant.elementwise`'s ops with the rounding kit of
``mx_specs`` (:func:`.mapping.rounding_kit`; the backward specs give the gradient kit), in the input's
dtype; ``mx_specs`` None is plain torch.

- ``sigmoid(x) = q(1 / q(q(e**-q(x)) + 1))``; ``tanh``, ``relu``, ``relu6``, ``leaky_relu``, ``silu``:
  the element-wise ops of the same names (their module notes give every step, as microxcaling's).
- ``gelu(x)``: microxcaling's form ``x * sigmoid(sqrt(8/pi) (x + 0.044715 x**3))`` with bfloat16
  constants (``elementwise.gelu(approximate="sigmoid")``), or with ``first_order_gelu``
  ``x * sigmoid(1.702 x)`` (``approximate="quick"``); ``approximate`` is accepted and ignored, as there.

``inplace=True`` is accepted and computed out of place.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import torch

from ... import elementwise as ew
from . import _torch
from .mapping import rounding_kit
from .module_specs import MxSpecsMixin
from .specs import apply_mx_specs, get_backwards_mx_specs

__all__ = ["sigmoid", "tanh", "relu", "relu6", "leaky_relu", "silu", "gelu", "Sigmoid", "Tanh", "ReLU", "ReLU6",
           "LeakyReLU", "SiLU", "GELU"]


def _rounded(op: Callable[..., torch.Tensor], input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]],
             **args: Any) -> torch.Tensor:
    """``op(input, **args)`` with the rounding kit of ``mx_specs`` (gradient kit from the backward specs)."""
    specs = apply_mx_specs(mx_specs)
    kit = rounding_kit(specs, grad=get_backwards_mx_specs(specs))
    return op(input, precision=kit, **args).to(input.dtype)


def sigmoid(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.sigmoid`` with ``mx_specs``."""
    return _torch.sigmoid(input) if mx_specs is None else _rounded(ew.sigmoid, input, mx_specs)


def tanh(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.tanh`` with ``mx_specs``."""
    return _torch.tanh(input) if mx_specs is None else _rounded(ew.tanh, input, mx_specs)


def relu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu(input, inplace=inplace)
    return _rounded(ew.relu, input, mx_specs)


def relu6(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
          name: Optional[str] = None) -> torch.Tensor:
    """``F.relu6`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu6(input, inplace=inplace)
    return _rounded(ew.relu6, input, mx_specs)


def leaky_relu(input: torch.Tensor, negative_slope: float = 0.01, inplace: bool = False,
               mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``F.leaky_relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.leaky_relu(input, negative_slope, inplace=inplace)
    return _rounded(ew.leaky_relu, input, mx_specs, negative_slope=float(negative_slope))


def silu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.silu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.silu(input, inplace=inplace)
    return _rounded(ew.silu, input, mx_specs)


def gelu(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
         approximate: Any = None, name: Optional[str] = None) -> torch.Tensor:
    """microxcaling's GELU (tanh form; plain torch ``gelu(approximate='tanh')`` when ``mx_specs`` is None
    and not ``first_order_gelu``)."""
    if mx_specs is None and not first_order_gelu:
        return _torch.gelu(input, approximate="tanh")
    return _rounded(ew.gelu, input, mx_specs, approximate="quick" if first_order_gelu else "sigmoid")


class Sigmoid(MxSpecsMixin, torch.nn.Sigmoid):
    """``torch.nn.Sigmoid`` taking ``mx_specs``."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__()
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return sigmoid(input, mx_specs=self.specs_or_none())


class Tanh(MxSpecsMixin, torch.nn.Tanh):
    """``torch.nn.Tanh`` taking ``mx_specs``."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__()
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return tanh(input, mx_specs=self.specs_or_none())


class ReLU(MxSpecsMixin, torch.nn.ReLU):
    """``torch.nn.ReLU`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return relu(input, self.inplace, mx_specs=self.specs_or_none())


class ReLU6(MxSpecsMixin, torch.nn.ReLU6):
    """``torch.nn.ReLU6`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return relu6(input, self.inplace, mx_specs=self.specs_or_none())


class LeakyReLU(MxSpecsMixin, torch.nn.LeakyReLU):
    """``torch.nn.LeakyReLU`` taking ``mx_specs``."""

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False,
                 mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> None:
        super().__init__(negative_slope, inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return leaky_relu(input, self.negative_slope, self.inplace, mx_specs=self.specs_or_none())


class SiLU(MxSpecsMixin, torch.nn.SiLU):
    """``torch.nn.SiLU`` taking ``mx_specs``."""

    def __init__(self, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(inplace)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return silu(input, self.inplace, mx_specs=self.specs_or_none())


class GELU(MxSpecsMixin, torch.nn.GELU):
    """``torch.nn.GELU`` taking ``mx_specs`` (microxcaling's tanh form; ``approximate`` ignored)."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
                 approximate: Any = None, name: Optional[str] = None) -> None:
        super().__init__(approximate="tanh")
        self.first_order_gelu = first_order_gelu
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu(input, mx_specs=self.specs_or_none(), first_order_gelu=self.first_order_gelu)
