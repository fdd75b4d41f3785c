"""Build the quant tensor that matches a core module's output and the element format."""
from __future__ import annotations

import torch

from ..core import QuantOutput
from ..formats import ElementFormat, FloatFormat, IntFormat
from .base import QuantTensor
from .float_quant_tensor import FloatQuantTensor
from .groupwise_float import GroupwiseFloatQuantTensor
from .groupwise_int import GroupwiseIntQuantTensor
from .int_quant_tensor import IntQuantTensor

__all__ = ["quant_tensor_from_output"]


def _int_fields(fmt: IntFormat) -> dict:
    return {"bit_width": fmt.bit_width, "signed": fmt.signed, "narrow_range": fmt.narrow_range}


def _float_fields(fmt: FloatFormat) -> dict:
    return {"exponent_bit_width": fmt.exponent_bit_width, "mantissa_bit_width": fmt.mantissa_bit_width,
            "signed": fmt.signed, "nan_inf_rule": fmt.special_values, "exponent_bias": fmt.bias}


def quant_tensor_from_output(out: QuantOutput, fmt: ElementFormat) -> QuantTensor:
    """Int/Float, group-wise or not, from ``out``. An integer tensor's scale is
    ``X * 2**-frac_bits`` (so that ``value = int * scale``); a float tensor's is ``X``."""
    if isinstance(fmt, IntFormat):
        scale = out.scale * float(2.0 ** -fmt.frac_bits)
        fields = _int_fields(fmt)
    elif isinstance(fmt, FloatFormat):
        scale = out.scale
        fields = _float_fields(fmt)
    else:
        raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")
    zero_point = torch.zeros_like(scale, memory_format=torch.contiguous_format).detach()
    if out.layout is not None:
        layout = out.layout
        cls = GroupwiseIntQuantTensor if isinstance(fmt, IntFormat) else GroupwiseFloatQuantTensor
        return cls(out.value, scale, zero_point, layout.block_size, layout.dim, layout.shape, **fields)
    cls = IntQuantTensor if isinstance(fmt, IntFormat) else FloatQuantTensor
    return cls(out.value, scale, zero_point, **fields)
