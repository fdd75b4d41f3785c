"""One accessor for a quant layer's group-quantized weight (codes, scale codes, tensor scale, layout, format).

``group_quantized_weight(layer)`` is what every reader of a layer's quantized weight calls (ONNX
export, packed state dicts, ``pack_model``, checkpoint writers): a
:class:`groupquant.ops.GroupQuantized` equal, bit for bit, to ``layer.quant_weight().to_group_quantized()``.
A weight that is float or not group-wise raises :class:`WeightNotGroupQuantized` naming the layer
and the setting (the one named error of this accessor).

One route: the weight proxy's :meth:`~groupquant.proxy.QuantProxy.quantized` quant tensor, read by
its ``to_group_quantized()``. Where the weight quantizer is the one-pass abs-max route
(:class:`groupquant.core.DynamicQuant`: MX, NVFP4 and other group quantizers whose scales come
from each tensor) that tensor holds the codes and scale codes the quantize op returned (the same
op settings as its fake-quant pass, :meth:`groupquant.core.QuantSpec.op_settings`); other
quantizers (learned or searched scales) give values and scales, off which the quant tensor reads
its codes.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ...core import DynamicQuant, QuantSpec
from ...ops import GroupQuantized
from ...proxy import QuantProxy

__all__ = ["group_quantized_weight", "WeightNotGroupQuantized", "codes_from_the_op"]


class WeightNotGroupQuantized(ValueError):
    """The layer's weight is float or not quantized group-wise (the message names the layer and the setting)."""


def codes_from_the_op(proxy: QuantProxy) -> bool:
    """Whether ``proxy``'s quantized weight is exactly one call of the quantize op with fixed bits
    (what the MX all-gather stands in for): a dynamic (abs-max) group-wise quantizer without an
    element precision and with deterministic rounding."""
    spec: Optional[QuantSpec] = proxy.spec
    return (spec is not None and spec.is_group and type(proxy.tensor_quant) is DynamicQuant
            and spec.rounding != "stochastic")


def group_quantized_weight(layer: nn.Module, name: Optional[str] = None) -> GroupQuantized:
    """The group-quantized weight of ``layer`` (a quant layer with ``weight_quant`` and ``weight``).

    ``name`` (default: the layer's class name) starts the message of :class:`WeightNotGroupQuantized`,
    raised when ``weight_quant`` is None (float weight) or not group-wise (per tensor / channel)."""
    where = name or type(layer).__name__
    proxy = getattr(layer, "weight_quant", None)
    if not isinstance(proxy, QuantProxy) or not proxy.is_quant_enabled:
        raise WeightNotGroupQuantized(f"{where}: weight_quant is None (a float weight); a group-quantized weight "
                                      "needs a group-wise weight quantizer (MX formats, NVFP4, integer groups)")
    spec = proxy.spec
    qt = proxy.quantized(layer.weight)  # type: ignore[arg-type]
    if not spec.is_group:
        raise WeightNotGroupQuantized(
            f"{where}: weight_quant={proxy.quantizer.__name__} is not group-wise (per-{spec.granularity} scales; "
            f"its weight quantizer gives {type(qt).__name__}); a group-quantized weight needs "
            "scaling_per_output=GROUP (MX formats, NVFP4, integer groups)")
    return qt.to_group_quantized()
