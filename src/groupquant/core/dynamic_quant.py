"""Quantize-dequantize with abs-max scales computed from the tensor itself, on every call.

This is the MX path (OCP MX v1.0: per-group E8M0 scales from the group's abs-max) and the
statistics path of per-tensor and per-channel quantizers. Every granularity is expressed as a
call of :func:`groupquant.ops.fake_quant_with_scale` (groups along one dim; channel and tensor
granularity as a reshape into one group per channel / one group in all), so the native kernel
behind that function runs here, the output equals ``fake_quant`` bit for bit, and the scales come
from the same pass (no second abs-max reduction).
"""
from __future__ import annotations

from typing import Dict, Optional

import torch
from torch import nn

from ..ops import FakeQuantResult, GroupSpec, fake_quant_spec_with_scale, quantize_spec
from .granularity import ScaleGranularity
from .quant_spec import QuantSpec

__all__ = ["DynamicQuant", "dynamic_fake_quant"]


def _as_groups(x: torch.Tensor, granularity: ScaleGranularity) -> torch.Tensor:
    """``x`` reshaped so that one group along a dim is one scale (the view whose block and dim
    :meth:`ScaleGranularity.op_block` gives). Group granularity keeps ``x`` as is."""
    if granularity.kind == "group":
        return x
    if granularity.kind == "tensor":
        return x.reshape(1, -1)
    d = granularity.channel_dim(x.ndim)
    if d == 0:
        return x.reshape(x.shape[0], -1)
    return x.movedim(d, -1).reshape(-1, x.shape[d])


def _from_groups(y: torch.Tensor, x: torch.Tensor, granularity: ScaleGranularity) -> torch.Tensor:
    """Inverse of :func:`_as_groups` for an output ``y`` of input ``x``."""
    if granularity.kind == "group":
        return y
    if granularity.kind == "channel":
        d = granularity.channel_dim(x.ndim)
        if d != 0:
            return y.reshape(x.movedim(d, -1).shape).movedim(-1, d)
    return y.reshape(x.shape)


_MAX_REMEMBERED = 64


def _op_spec(grouped: torch.Tensor, spec: QuantSpec, ndim: int,
             remembered: Optional[Dict[tuple, GroupSpec]]) -> GroupSpec:
    """The op record for ``grouped`` (the view of a tensor of ``ndim`` dims): the spec's
    :meth:`~QuantSpec.op_settings` with ``grouped``'s layout; kept in ``remembered`` per shape and
    dtype (not for stochastic rounding, which draws a seed per call, nor while compiling)."""
    keep = remembered is not None and spec.rounding != "stochastic" and not torch.compiler.is_compiling()
    key = (grouped.shape, grouped.dtype)
    op_spec = remembered.get(key) if keep else None
    if op_spec is None:
        op_spec = spec.op_settings(ndim).group_spec(grouped)
        if keep:
            if len(remembered) >= _MAX_REMEMBERED:
                remembered.clear()
            remembered[key] = op_spec
    return op_spec


def dynamic_fake_quant(x: torch.Tensor, spec: QuantSpec, contract: bool = True,
                       remembered: Optional[Dict[tuple, GroupSpec]] = None, codes: bool = False) -> FakeQuantResult:
    """Quantize-dequantize ``x`` by ``spec`` with abs-max scales, from one kernel pass
    (:func:`groupquant.ops.fake_quant_with_scale`'s route).

    Returns values (with the STE gradient) and float32 scales in the granularity's scale shape;
    group values are contracted (``result.layout``) when ``contract``, else in ``x``'s shape.
    ``remembered``: a dict in which the op specs of the shapes seen are kept (a module's); a
    group-granularity tensor of a shape seen before goes from there straight to the op.
    ``codes`` (group granularity): run the quantize op instead, with the same record, and keep
    what it returned (codes, scale codes: :meth:`FakeQuantResult.from_quantized`; no gradient).
    """
    if not contract and remembered and spec.granularity == "group" and not torch.compiler.is_compiling():
        op_spec = remembered.get((x.shape, x.dtype))
        if op_spec is not None:  # group granularity: the grouped tensor is x, values in its shape
            return fake_quant_spec_with_scale(x, op_spec, spec.ste)
    g = spec.scale_granularity
    grouped = _as_groups(x, g)
    op_spec = _op_spec(grouped, spec, x.ndim, remembered)
    if codes and g.is_group:
        return FakeQuantResult.from_quantized(quantize_spec(x, op_spec))
    result = fake_quant_spec_with_scale(grouped, op_spec, spec.ste)
    ts = result.tensor_scale
    if not g.is_group:
        return FakeQuantResult(_from_groups(result.value, x, g), result.scale.reshape(g.scale_shape(x.shape)),
                               tensor_scale=ts)
    if not contract:
        return result
    layout = op_spec.layout  # (group granularity: the grouped tensor is x)
    return FakeQuantResult(layout.contract(result.value), result.scale, layout, tensor_scale=ts)


class DynamicQuant(nn.Module):
    """Abs-max scaled quantize-dequantize through :func:`groupquant.fake_quant`, by ``spec``."""

    def __init__(self, spec: QuantSpec) -> None:
        super().__init__()
        self.spec = spec
        self._op_specs: Dict[tuple, GroupSpec] = {}  # per input shape and dtype, checked once

    @property
    def fmt(self):
        return self.spec.fmt

    def extra_repr(self) -> str:
        s = self.spec
        return (f"fmt={s.fmt.name}, granularity={s.granularity}, group_size={s.group_size}, "
                f"scale_mode={s.scale_rule}, rounding={s.rounding}, ste={s.ste}"
                + ("" if s.uses_default_scale_format else f", scale_format={s.scale_format.name}, "
                   f"tensor_scale={s.tensor_scale}"))

    def forward(self, x: torch.Tensor, contract: bool = True, codes: bool = False) -> FakeQuantResult:
        """Quantize-dequantize ``x``; group values contracted (unless ``contract`` is False: then
        in x's shape), scales beside them; with ``codes``, the quantize op's codes and scale codes too."""
        return dynamic_fake_quant(x, self.spec, contract, self._op_specs, codes)

    def __setstate__(self, state: dict) -> None:
        state.setdefault("_op_specs", {})
        super().__setstate__(state)
