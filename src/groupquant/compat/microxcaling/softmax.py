"""``softmax`` / ``Softmax`` taking ``mx_specs``: :func:`groupquant.elementwise.softmax` (its one
order) with the rounding kit of ``mx_specs`` (:func:`.mapping.rounding_kit`: ``y = q(e / q(sum e))``,
or ``q(e * q(1 / sum))`` with ``vec_use_recip``), base 2 with ``softmax_exp2``, and the kit of the
backward specs for the gradient. The result keeps the input's dtype.
"""
from __future__ import annotations

import warnings
from typing import Any, Mapping, Optional

import torch

from ...elementwise.softmax import softmax as ew_softmax
from . import _torch
from .mapping import rounding_kit
from .module_specs import MxSpecsMixin
from .specs import apply_mx_specs, get_backwards_mx_specs

__all__ = ["softmax", "Softmax"]


def implicit_dim(ndim: int) -> int:
    """torch's deprecated choice of softmax dim for ``dim=None`` (0 for 0-, 1- and 3-d input, else 1),
    with torch's warning."""
    warnings.warn("Implicit dimension choice for softmax has been deprecated. Change the call to include dim=X "
                  "as an argument.", UserWarning, stacklevel=3)
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: torch.Tensor, dim: Optional[int] = -1, mx_specs: Optional[Mapping[str, Any]] = None,
            name: Optional[str] = None) -> torch.Tensor:
    """``F.softmax`` with ``mx_specs`` (plain when None); ``dim=None`` picks torch's implicit dim."""
    if mx_specs is None:
        return _torch.softmax(input, dim=dim)
    if dim is None:
        dim = implicit_dim(input.ndim)
    specs = apply_mx_specs(mx_specs)
    kit = rounding_kit(specs, grad=get_backwards_mx_specs(specs))
    out = ew_softmax(input, dim, kit, base2=bool(specs["softmax_exp2"]))
    return out.to(input.dtype)


class Softmax(MxSpecsMixin, torch.nn.Softmax):
    """``torch.nn.Softmax`` taking ``mx_specs``."""

    def __init__(self, dim: Optional[int] = None, mx_specs: Optional[Mapping[str, Any]] = None,
                 name: Optional[str] = None) -> None:
        super().__init__(dim)
        self._init_mx(mx_specs, name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return softmax(input, self.dim, mx_specs=self.specs_or_none())
