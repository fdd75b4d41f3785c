"""From a :class:`QuantSpec` to the module that quantizes a tensor: the one place that decides it.

``stats`` + ``abs_max``  -> :class:`DynamicQuant` (one fused kernel pass: values and scales).
``stats`` + ``percentile`` -> :class:`ScaledQuant` around :class:`StatsScale`.
``stats`` + ``mse``      -> :class:`ScaledQuant` around :class:`MSEScale` (search per group).
``running_stats``        -> :class:`ScaledQuant` around :class:`RunningStatsScale` (per tensor).
``learned``              -> :class:`ScaledQuant` around :class:`LearnedScale` (shape from the tensor).
"""
from __future__ import annotations

from typing import Optional, Sequence

from torch import nn

from .dynamic_quant import DynamicQuant
from .learned_scale import LearnedScale
from .mse_scale import MSEScale
from .precision_round import PrecisionThen
from .quant_spec import QuantSpec
from .running_scale import RunningStatsScale
from .scaled_quant import ScaledQuant
from .stats_scale import StatsScale

__all__ = ["build_tensor_quant", "learned_scale_shape"]


def learned_scale_shape(spec: QuantSpec, tensor_shape: Optional[Sequence[int]]) -> Optional[tuple]:
    """Shape of a learned scale: ``()`` per tensor, from the tensor's shape where the layer gives it
    (weights), else None (the parameter is created on the first call)."""
    g = spec.scale_granularity
    if g.kind == "tensor":
        return ()
    if tensor_shape is None:
        return None
    return tuple(g.scale_shape(tensor_shape))


def _mse_scale(spec: QuantSpec) -> nn.Module:
    """The MSE search: exponents from ``mse_window`` below the floor rule's to one above it."""
    return MSEScale(spec.fmt, spec.scale_granularity, below=spec.mse_window, above=1, rounding=spec.rounding)


def build_tensor_quant(spec: QuantSpec, tensor_shape: Optional[Sequence[int]] = None) -> nn.Module:
    """The quantize-dequantize module of ``spec`` (``tensor_shape``: the weight's shape, which
    sizes learned scales; None for activations); with an element precision, wrapped so that the
    tensor is rounded to it first."""
    module = _quant_module(spec, tensor_shape)
    return module if spec.element_precision is None else PrecisionThen(spec.element_precision, module)


def _quant_module(spec: QuantSpec, tensor_shape: Optional[Sequence[int]]) -> nn.Module:
    """The module of ``spec`` itself (see the module doc)."""
    if spec.is_dynamic:
        return DynamicQuant(spec)
    if spec.scale_source == "stats":
        scale = _mse_scale(spec) if spec.stats_op == "mse" else StatsScale(spec)
    elif spec.scale_source == "running_stats":
        scale = RunningStatsScale(spec)
    else:
        scale = LearnedScale(spec, learned_scale_shape(spec, tensor_shape))
    return ScaledQuant(spec, scale)
