"""Activations taking ``mx_specs``: :mod:`groupquant.elementwise`'s ops with the rounding kit of
``mx_specs`` (:func:`.mapping.rounding_kit`; the backward specs give the gradient kit), in the input's
dtype; ``mx_specs`` None is plain torch.

- ``sigmoid(x) = q(1 / q(q(e**-q(x)) + 1))``; ``tanh``, ``relu``, ``relu6``, ``leaky_relu``, ``silu``:
  the element-wise ops of the same names (their module notes give every step, as microxcaling's).
- ``gelu(x)``: microxcaling's form ``x * sigmoid(sqrt(8/pi) (x + 0.044715 x**3))`` with bfloat16
  constants (``elementwise.gelu(approximate="sigmoid")``), or with ``first_order_gelu``
  ``x * sigmoid(1.702 x)`` (``approximate="quick"``); ``approximate`` is accepted and ignored, as there.

``inplace=True`` is accepted and computed out of place.

``softmax``: :func:`groupquant.elementwise.softmax` (its one order: ``y = q(e / q(sum e))``, or
``q(e * q(1 / sum))`` with ``vec_use_recip``), base 2 with ``softmax_exp2``. The module classes are
made from their forward (:func:`.module_specs.mx_module`).
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

import torch

from ... import elementwise as ew
from . import _torch
from .mapping import rounded
from .module_specs import MxSpecsMixin, calls, mx_module
from .specs import apply_mx_specs

__all__ = ["sigmoid", "tanh", "relu", "relu6", "leaky_relu", "silu", "gelu", "softmax", "Sigmoid", "Tanh", "ReLU",
           "ReLU6", "LeakyReLU", "SiLU", "GELU", "Softmax"]


def sigmoid(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.sigmoid`` with ``mx_specs``."""
    return _torch.sigmoid(input) if mx_specs is None else rounded(ew.sigmoid, input, mx_specs)


def tanh(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``torch.tanh`` with ``mx_specs``."""
    return _torch.tanh(input) if mx_specs is None else rounded(ew.tanh, input, mx_specs)


def relu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu(input, inplace=inplace)
    return rounded(ew.relu, input, mx_specs)


def relu6(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
          name: Optional[str] = None) -> torch.Tensor:
    """``F.relu6`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.relu6(input, inplace=inplace)
    return rounded(ew.relu6, input, mx_specs)


def leaky_relu(input: torch.Tensor, negative_slope: float = 0.01, inplace: bool = False,
               mx_specs: Optional[Mapping[str, Any]] = None, name: Optional[str] = None) -> torch.Tensor:
    """``F.leaky_relu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.leaky_relu(input, negative_slope, inplace=inplace)
    return rounded(ew.leaky_relu, input, mx_specs, negative_slope=float(negative_slope))


def silu(input: torch.Tensor, inplace: bool = False, mx_specs: Optional[Mapping[str, Any]] = None,
         name: Optional[str] = None) -> torch.Tensor:
    """``F.silu`` with ``mx_specs``."""
    if mx_specs is None:
        return _torch.silu(input, inplace=inplace)
    return rounded(ew.silu, input, mx_specs)


def gelu(input: torch.Tensor, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
         approximate: Any = None, name: Optional[str] = None) -> torch.Tensor:
    """microxcaling's GELU (tanh form; plain torch ``gelu(approximate='tanh')`` when ``mx_specs`` is None
    and not ``first_order_gelu``)."""
    if mx_specs is None and not first_order_gelu:
        return _torch.gelu(input, approximate="tanh")
    return rounded(ew.gelu, input, mx_specs, approximate="quick" if first_order_gelu else "sigmoid")


def softmax(input: torch.Tensor, dim: Optional[int] = -1, mx_specs: Optional[Mapping[str, Any]] = None,
            name: Optional[str] = None) -> torch.Tensor:
    """``F.softmax`` with ``mx_specs`` (plain when None); ``dim=None`` picks torch's implicit dim
    (0 for 0-, 1- and 3-d input, else 1), with torch's warning."""
    if mx_specs is None:
        return _torch.softmax(input, dim=dim)
    if dim is None:
        warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X "
                      "as an argument.", UserWarning, stacklevel=2)
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return rounded(ew.softmax, input, mx_specs, dim, base2=bool(apply_mx_specs(mx_specs)["softmax_exp2"]))


Sigmoid = mx_module(torch.nn.Sigmoid, 0, calls(sigmoid))
Tanh = mx_module(torch.nn.Tanh, 0, calls(tanh))
ReLU = mx_module(torch.nn.ReLU, 1, calls(relu, "inplace"))
ReLU6 = mx_module(torch.nn.ReLU6, 1, calls(relu6, "inplace"))
LeakyReLU = mx_module(torch.nn.LeakyReLU, 2, calls(leaky_relu, "negative_slope", "inplace"))
SiLU = mx_module(torch.nn.SiLU, 1, calls(silu, "inplace"))
Softmax = mx_module(torch.nn.Softmax, 1, calls(softmax, "dim"))


class GELU(MxSpecsMixin, torch.nn.GELU):
    """``torch.nn.GELU`` taking ``mx_specs`` (microxcaling's tanh form; ``approximate`` ignored)."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]] = None, first_order_gelu: bool = False,
                 approximate: Any = None, name: Optional[str] = None) -> None:
        super().__init__(approximate="tanh")
        self.first_order_gelu = first_order_gelu
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return gelu(input, mx_specs=self.specs_or_none(), first_order_gelu=self.first_order_gelu)
