"""ONNX subgraphs for groupquant's quantized layers.

- Weights with a group-wise quantizer (MX and int/float per group): element codes and scales as
  initializers and a blocked ``DequantizeLinear`` (:mod:`.weight`), then ``MatMul`` /
  ``Conv``. A layer without ``weight_quant`` keeps its float weight.
- Input and output quantizers that compute scales per group on the fly (the MX activation
  quantizers, NVFP4Act with its per-tensor scale): the dynamic subgraph of :mod:`.act_quant`.
- Every scale format exports exactly (E{k}M0, UE4M3, other unsigned minifloats, bfloat16, float32),
  NVFP4 weights as FP4 values re-encoded to FLOAT8E4M3FN, UE4M3 scale bytes and a ``Mul`` by the
  tensor scale (see :mod:`.weight`).
- A quantized bias is static: its fake-quant values are a float32 initializer.

Per-tensor / per-channel weight quantizers, static or learned activation scales and rounding
other than nearest-even for activations raise :class:`ExportError` naming the layer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np
import torch
from torch import nn

from ...nn import QuantConv1d, QuantConv2d, QuantIdentity, QuantLinear, QuantReLU
from ...nn.layers.group_quantized_weight import WeightNotGroupQuantized
from ...proxy import QuantProxy
from ...quant_tensor import plain
from ..errors import ExportError
from .act_quant import dynamic_fake_quant_of
from .builder import GraphBuilder
from .torch_modules import NodeInfo, conv_of, float_array, linear_of
from .weight import SCALE_FORMATS, weight_dequant_of
from ..inference.packed_linear import PackedLinear

__all__ = ["QuantLayerOptions", "find_quant_converter"]


@dataclass(frozen=True)
class QuantLayerOptions:
    """Export choices for quantized layers: ``scale_format`` of power-of-two weight scales
    ('float32' or 'e8m0'; float scales are always float32)."""

    scale_format: str = "float32"

    def __post_init__(self) -> None:
        if self.scale_format not in SCALE_FORMATS:
            raise ValueError(f"scale_format must be one of {SCALE_FORMATS}, got {self.scale_format!r}")


def _quantizer_name(proxy: QuantProxy) -> str:
    """The quantizer class a proxy was built from (``NVFP4Act``), else the proxy's class name."""
    return getattr(getattr(proxy, "quantizer", None), "__name__", None) or type(proxy).__name__


def _hint(info: NodeInfo) -> str:
    return info.name.replace(".", "_") or "layer"


def _act_quant(b: GraphBuilder, proxy: QuantProxy, x: str, shape: Optional[torch.Size], info: NodeInfo,
               which: str) -> str:
    """The dynamic activation quantizer of ``proxy`` applied to ``x`` (identity when disabled)."""
    if not proxy.is_quant_enabled:
        return x
    spec = proxy.spec
    what = f"{which} {_quantizer_name(proxy)}"
    if not (spec.is_dynamic and spec.is_group):
        kind = spec.granularity if spec.is_dynamic else f"{spec.scale_source}/{spec.stats_op}"
        raise ExportError(info.name, what, f"{which} uses {kind} scaling; only dynamic group-wise (MX) activation "
                          "quantizers export")
    if spec.element_precision is not None:
        raise ExportError(info.name, what, f"{which} rounds to element_precision {spec.element_precision.name} first; "
                          "that rounding is not exported")
    if spec.rounding != "even" or not spec.saturating:
        raise ExportError(info.name, what, f"{which} rounding={spec.rounding!r}, saturating={spec.saturating}; "
                          "only 'even' saturating rounding exports")
    if shape is None:
        raise ExportError(info.name, what, "the shape of the quantized tensor is unknown")
    try:
        dim = spec.op_settings(len(shape)).dim  # the grouped dim (a ValueError naming group_dim when out of range)
        return dynamic_fake_quant_of(b, x, len(shape), int(shape[dim]), spec)
    except ValueError as e:
        raise ExportError(info.name, what, str(e)) from e


def _weight(b: GraphBuilder, layer: nn.Module, info: NodeInfo, options: QuantLayerOptions) -> str:
    """The layer's weight as a graph value: codes + DequantizeLinear (its ``group_quantized_weight()``),
    or the float weight of a layer without a weight quantizer (the accessor says which, for every
    quant layer: a ``PackedLinear`` always has its packed weight)."""
    try:
        q = layer.group_quantized_weight(info.name)
    except WeightNotGroupQuantized as e:
        if not layer.weight_quant.is_quant_enabled:  # a float weight
            return b.const(float_array(layer.weight, info.name), hint=f"{_hint(info)}_weight")
        raise ExportError(info.name, type(layer).__name__, f"{e}; only group-wise (MX / per-group) weight "
                          "quantizers export") from None
    what = f"{type(layer).__name__} weight_quant {_quantizer_name(layer.weight_quant)}"
    power_of_two = q.scale_codes is not None and q.scale_format.is_power_of_two
    scale_format = options.scale_format if power_of_two else "float32"  # the option is for power-of-two scales
    try:
        return weight_dequant_of(b, q, f"{_hint(info)}_weight", scale_format)
    except ValueError as e:
        raise ExportError(info.name, what, str(e)) from e


def _bias(b: GraphBuilder, layer: nn.Module, info: NodeInfo) -> Optional[str]:
    with torch.no_grad():
        bias = plain(layer.quant_bias())
    return None if bias is None else b.const(float_array(bias, info.name), hint=f"{_hint(info)}_bias")


def _rotation(b: GraphBuilder, layer: nn.Module, x: str, info: NodeInfo) -> str:
    """The layer's online input rotation (``groupquant.calib.rotate_model``), if any: the butterfly
    passes of :func:`groupquant.ops.hadamard.fwht` (``Reshape`` to ``[-1, n/2h, 2h]``, halves by
    ``Slice``, ``Add`` / ``Sub``, ``Concat``), then ``Mul`` by ``1/sqrt(b)`` in float32: the same
    operations in the same order as the layer, so the same bits."""
    rotation = getattr(layer, "input_rotation", None)
    if rotation is None:
        return x
    if hasattr(rotation, "matrix"):  # a learned rotation (groupquant.calib.learned_rotation)
        raise ExportError(info.name, "input_rotation", "a learned block rotation (the 'learn_rotations' calibration "
                          "method) is not written to ONNX; calibrate without 'learn_rotations' to export, or keep the "
                          "model in PyTorch (state_dict / groupquant.save with format='safetensors')")
    shape = info.in_shapes[0]
    if shape is None:
        raise ExportError(info.name, "input_rotation", "the shape of the rotated input is unknown")
    block, n, hint = rotation.block_size, int(shape[-1]), _hint(info)
    y, h = x, 1
    while h < block:
        pairs = b.node("Reshape", [y, b.ints([-1, n // (2 * h), 2 * h])], hint=f"{hint}_pairs")
        axis = b.ints([2])
        first = b.node("Slice", [pairs, b.ints([0]), b.ints([h]), axis], hint=f"{hint}_first")
        second = b.node("Slice", [pairs, b.ints([h]), b.ints([2 * h]), axis], hint=f"{hint}_second")
        y = b.node("Concat", [b.node("Add", [first, second]), b.node("Sub", [first, second])], hint=f"{hint}_fwht",
                   axis=2)
        h *= 2
    y = b.node("Mul", [y, b.const(np.float32(1.0 / math.sqrt(block)))], hint=f"{hint}_rotated")
    return b.node("Reshape", [y, b.node("Shape", [x])], hint=f"{hint}_rotated")


def _linear(b: GraphBuilder, layer: QuantLinear, info: NodeInfo, inputs: List[str], options: QuantLayerOptions) -> str:
    x = _rotation(b, layer, inputs[0], info)
    x = _act_quant(b, layer.input_quant, x, info.in_shapes[0], info, "input_quant")
    y = linear_of(b, x, _weight(b, layer, info, options), _bias(b, layer, info), hint=_hint(info))
    return _act_quant(b, layer.output_quant, y, info.out_shape, info, "output_quant")


def _conv(b: GraphBuilder, layer: nn.Module, info: NodeInfo, inputs: List[str], options: QuantLayerOptions) -> str:
    x = _act_quant(b, layer.input_quant, inputs[0], info.in_shapes[0], info, "input_quant")
    y = conv_of(b, x, _weight(b, layer, info, options), _bias(b, layer, info), layer, info)
    return _act_quant(b, layer.output_quant, y, info.out_shape, info, "output_quant")


def _identity(b: GraphBuilder, layer: QuantIdentity, info: NodeInfo, inputs: List[str],
              options: QuantLayerOptions) -> str:
    x = _act_quant(b, layer.input_quant, inputs[0], info.in_shapes[0], info, "input_quant")
    return _act_quant(b, layer.output_quant, x, info.out_shape, info, "output_quant")


def _relu(b: GraphBuilder, layer: QuantReLU, info: NodeInfo, inputs: List[str], options: QuantLayerOptions) -> str:
    x = _act_quant(b, layer.input_quant, inputs[0], info.in_shapes[0], info, "input_quant")
    return _act_quant(b, layer.output_quant, b.node("Relu", [x]), info.out_shape, info, "output_quant")


_CONVERTERS = ((PackedLinear, _linear), (QuantLinear, _linear), (QuantConv1d, _conv), (QuantConv2d, _conv), (QuantIdentity, _identity),
               (QuantReLU, _relu))


def find_quant_converter(m: nn.Module) -> Optional[Callable]:
    """The converter for a groupquant quantized layer, or None for any other module."""
    for cls, convert in _CONVERTERS:
        if isinstance(m, cls):
            return convert
    return None
