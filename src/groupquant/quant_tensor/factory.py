"""Build the quant tensor that matches a core module's output and the quantizer's spec."""
from __future__ import annotations

import torch

from ..core import QuantSpec
from ..formats import FloatFormat, IntFormat
from ..ops import FakeQuantResult
from .base import QuantTensor
from .float_quant_tensor import FloatQuantTensor
from .groupwise_float import GroupwiseFloatQuantTensor
from .groupwise_int import GroupwiseIntQuantTensor
from .int_quant_tensor import IntQuantTensor

__all__ = ["quant_tensor_from_output"]


def quant_tensor_from_output(out: FakeQuantResult, spec: QuantSpec, training: bool = False) -> QuantTensor:
    """Int/Float, group-wise or not, from ``out``: the layout, scales, codes (where the op gave
    them) and the format object exactly as the op produced and used them."""
    fmt = spec.fmt
    zero_point = torch.zeros_like(out.scale, memory_format=torch.contiguous_format).detach()
    if isinstance(fmt, IntFormat):
        if out.layout is not None:
            return GroupwiseIntQuantTensor(out.value, out.scale, zero_point, out.layout, fmt=fmt, training=training,
                                           tensor_scale_=out.tensor_scale, scale_format=spec.scale_format,
                                           op_codes_=out.codes, op_scale_codes_=out.scale_codes)
        return IntQuantTensor(out.value, out.scale, zero_point, fmt, training)
    if isinstance(fmt, FloatFormat):
        if out.layout is not None:
            return GroupwiseFloatQuantTensor(out.value, out.scale, zero_point, out.layout, fmt=fmt,
                                             saturating=spec.saturating, training=training,
                                             tensor_scale_=out.tensor_scale, scale_format=spec.scale_format,
                                             op_codes_=out.codes, op_scale_codes_=out.scale_codes)
        return FloatQuantTensor(out.value, out.scale, zero_point, fmt, spec.saturating, training)
    raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")
