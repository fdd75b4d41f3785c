"""Quant tensors: dequantized values with their scales and formats, usable as tensors.

``IntQuantTensor`` / ``FloatQuantTensor`` (per-tensor or per-channel scales) and
``GroupwiseIntQuantTensor`` / ``GroupwiseFloatQuantTensor`` (per-group scales, kept in the
contracted layout). All act as their ``.value`` in torch code (see :mod:`.base`).
"""
from .base import QuantTensor, plain
from .factory import quant_tensor_from_output
from .float_quant_tensor import FloatQuantTensor
from .groupwise import GroupwiseFields
from .groupwise_float import GroupwiseFloatQuantTensor
from .groupwise_int import GroupwiseIntQuantTensor
from .int_quant_tensor import IntQuantTensor

__all__ = [
    "QuantTensor", "plain", "quant_tensor_from_output", "FloatQuantTensor", "GroupwiseFields",
    "GroupwiseFloatQuantTensor", "GroupwiseIntQuantTensor", "IntQuantTensor",
]
