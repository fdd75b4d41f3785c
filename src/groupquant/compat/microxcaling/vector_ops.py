"""Vector steps rounded to the ``bfloat`` / ``fp`` precision of ``mx_specs`` (no gradient of their own).

Every compat op (norms, softmax, activations, simd ops) is written as a sequence of these steps,
in microxcaling's order, so each intermediate is rounded exactly where microxcaling rounds it:
``y = q(op(a, b))``. ``mx_specs['vec_use_recip']`` computes ``a / b`` as ``a * q(1 / b)``;
``mx_specs['vec_use_exp2']`` computes ``e**x`` as ``2**q(x * LOG2_E_BF16)``.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence, Union

import torch

from . import _torch
from .quantize import quantize_elemwise_op

__all__ = ["Vec", "LOG2_E_BF16", "LN_2_BF16"]

LOG2_E_BF16 = 1.4453125   # log2(e) rounded to bfloat16 (1 + 2**-2 + 2**-3 + 2**-4 + 2**-7)
LN_2_BF16 = 0.69140625    # ln(2) rounded to bfloat16

Operand = Union[torch.Tensor, float]
Dims = Union[int, Sequence[int]]


class Vec:
    """The rounded vector steps for one ``mx_specs`` and rounding mode (default ``mx_specs['round']``)."""

    def __init__(self, mx_specs: Optional[Mapping[str, Any]], round: Optional[str] = None) -> None:
        self.specs = mx_specs
        self.round = round

    def q(self, x: torch.Tensor) -> torch.Tensor:
        """Round ``x`` to the precision."""
        return quantize_elemwise_op(x, self.specs, self.round)

    def _flag(self, key: str) -> bool:
        return bool(self.specs and self.specs.get(key, False))

    def add(self, a: Operand, b: Operand) -> torch.Tensor:
        """``q(a + b)``."""
        return self.q(a + b)

    def sub(self, a: Operand, b: Operand) -> torch.Tensor:
        """``q(a - b)``."""
        return self.q(a - b)

    def mul(self, a: Operand, b: Operand) -> torch.Tensor:
        """``q(a * b)``."""
        return self.q(a * b)

    def recip(self, x: torch.Tensor) -> torch.Tensor:
        """``q(1 / x)``."""
        return self.q(1.0 / x)

    def div(self, a: Operand, b: Operand) -> torch.Tensor:
        """``q(a / b)``, or ``q(a * q(1 / b))`` with ``vec_use_recip``."""
        if self._flag("vec_use_recip"):
            inv = self.recip(b) if isinstance(b, torch.Tensor) else self.q(torch.as_tensor(1.0 / b))
            return self.mul(a, inv)
        return self.q(a / b)

    def exp2(self, x: torch.Tensor) -> torch.Tensor:
        """``q(2**x)``."""
        return self.q(_torch.exp2(x))

    def exp(self, x: torch.Tensor) -> torch.Tensor:
        """``q(e**x)``, or ``q(2**q(x * LOG2_E_BF16))`` with ``vec_use_exp2``."""
        if self._flag("vec_use_exp2"):
            return self.exp2(self.q(LOG2_E_BF16 * x))
        return self.q(_torch.exp(x))

    def sqrt(self, x: torch.Tensor) -> torch.Tensor:
        """``q(sqrt(x))``."""
        return self.q(_torch.sqrt(x))

    def tanh(self, x: torch.Tensor) -> torch.Tensor:
        """``q(tanh(x))``."""
        return self.q(_torch.tanh(x))

    def sum(self, x: torch.Tensor, dim: Dims, keepdim: bool = False) -> torch.Tensor:
        """``q(x.sum(dim))`` (the sum itself in x's dtype, one rounding at the end)."""
        return self.q(x.sum(dim, keepdim=keepdim))

    def mean(self, x: torch.Tensor, dim: Dims, keepdim: bool = False) -> torch.Tensor:
        """``div(sum(x, dim), n)``: two rounded steps, as microxcaling takes a mean."""
        dims = [dim] if isinstance(dim, int) else list(dim)
        n = math.prod(x.shape[d] for d in dims)
        return self.div(self.sum(x, dims, keepdim=keepdim), float(n))
