"""GemmRounding: the element-wise roundings around a quant layer's GEMM (a layer / recipe setting).

A GEMM layer may round, each value on its own to an unscaled precision
(:class:`groupquant.ops.precision.ElementPrecision`: bfloat16, fp16, any ExMy with its rounding
rule), the tensors around its GEMMs. Every field is None (no rounding) or a precision (a name such
as ``"bfloat16"`` is resolved once, at construction):

=================  =====================================================================
field              what is rounded
=================  =====================================================================
``input``          ``x`` before the input quantizer (straight-through gradient)
``weight``         ``W`` before its quantizer (straight-through gradient)
``bias``           ``b`` before its quantizer (straight-through gradient)
``output``         the GEMM result ``y = x W^T``; with a bias ``y = q(q(x W^T) + b)``
                   (``bias_add="rounded"``) or ``q(x W^T + b)`` (``"inside"``: the bias
                   enters the GEMM, one rounding)
``grad_output``    ``dY`` as it reaches the layer, before the backward GEMMs and the bias sum
``grad_input``     the result of the grad-input GEMM ``dX``
``grad_weight``    the result of the grad-weight GEMM ``dW``
``grad_bias``      the bias gradient ``sum dY``
=================  =====================================================================

``backward_operands``: the ``x`` and ``W`` the backward GEMMs re-quantize: ``"rounded"`` (after
``input`` / ``weight``, default) or ``"given"`` (as the layer received them). microxcaling's
``Linear`` is every field bfloat16 with ``bias_add="rounded"``; its convolution
the same with ``"inside"``; its ``quantize_backprop=False`` is no gradient rounding and ``"given"``.

Output and gradient roundings run in the quantized backward's GEMM (:mod:`groupquant.nn.gemm.backward_gemm`); a
layer with one set and backward quantization off is a ConfigError naming ``gemm_rounding``.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Optional

import torch

from ...core.precision_round import round_to_precision_ste
from ...inject import ConfigError
from ...ops.precision import ElementPrecision, resolve_precision, round_to_precision

__all__ = ["GemmRounding", "BIAS_ADDS", "BACKWARD_OPERANDS", "check_gemm_rounding", "round_operand", "round_result"]

BIAS_ADDS = ("rounded", "inside")
BACKWARD_OPERANDS = ("rounded", "given")
_PRECISIONS = ("input", "weight", "bias", "output", "grad_output", "grad_input", "grad_weight", "grad_bias")
_GRADS = ("grad_output", "grad_input", "grad_weight", "grad_bias")


@dataclass(frozen=True)
class GemmRounding:
    """The element-wise roundings around a GEMM (see the module table; None: not rounded)."""

    input: Optional[ElementPrecision] = None
    weight: Optional[ElementPrecision] = None
    bias: Optional[ElementPrecision] = None
    output: Optional[ElementPrecision] = None
    grad_output: Optional[ElementPrecision] = None
    grad_input: Optional[ElementPrecision] = None
    grad_weight: Optional[ElementPrecision] = None
    grad_bias: Optional[ElementPrecision] = None
    bias_add: str = "rounded"
    backward_operands: str = "rounded"

    def __post_init__(self) -> None:
        for name in _PRECISIONS:
            value = getattr(self, name)
            if value is not None and not isinstance(value, ElementPrecision):
                try:
                    object.__setattr__(self, name, resolve_precision(value))
                except (ValueError, TypeError) as err:
                    raise ConfigError(f"gemm_rounding.{name}", f"GemmRounding.{name}={value!r}: {err}") from None
        for name, allowed in (("bias_add", BIAS_ADDS), ("backward_operands", BACKWARD_OPERANDS)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"gemm_rounding.{name}", f"GemmRounding.{name} must be one of {allowed}, "
                                                           f"got {getattr(self, name)!r}")

    @property
    def rounds_gradients(self) -> bool:
        """Whether a gradient field is set (they need the quantized backward)."""
        return any(getattr(self, name) is not None for name in _GRADS)

    def describe(self) -> str:
        """The fields that are set, ``name=value`` (precisions by name)."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and value != f.default:
                parts.append(f"{f.name}={getattr(value, 'name', value)}")
        return f"GemmRounding({', '.join(parts)})"


def check_gemm_rounding(given: Any, backprop: bool, context: str) -> Optional[GemmRounding]:
    """The layer's ``gemm_rounding`` keyword checked: a :class:`GemmRounding` or None; TypeError
    otherwise, ConfigError when it rounds gradients while backward quantization is off."""
    if given is None:
        return None
    if not isinstance(given, GemmRounding):
        raise TypeError(f"{context}: gemm_rounding must be a groupquant.nn.GemmRounding or None, got {given!r}")
    if (given.rounds_gradients or given.output is not None) and not backprop:
        raise ConfigError("gemm_rounding", f"{context}: gemm_rounding rounds the output or gradients, which the "
                                           "quantized backward's GEMM does: set quantize_backprop=True "
                                           "(or a backward slot)")
    return given


def round_operand(t: Optional[torch.Tensor], precision: Optional[ElementPrecision]) -> Optional[torch.Tensor]:
    """``t`` rounded to ``precision`` with a straight-through gradient (``t`` when either is None)."""
    return t if t is None or precision is None else round_to_precision_ste(t, precision)


def round_result(t: Optional[torch.Tensor], precision: Optional[ElementPrecision]) -> Optional[torch.Tensor]:
    """``t`` rounded to ``precision`` (no gradient of its own; inside the GEMM's autograd function)."""
    return t if t is None or precision is None else round_to_precision(t, precision)
