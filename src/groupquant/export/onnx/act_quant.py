"""Dynamic group-wise fake quantization (activations) as an ONNX subgraph, equal to
``groupquant.fake_quant(x, fmt, block_size, dim, rounding='even', scale_mode=...)`` bit for bit.

Graph, for ``x`` of known rank with a known size ``C`` of the grouped dim:

1. zero-pad the grouped dim to a multiple of the block (``Pad``) and view it as ``(k, block)``
   (``Reshape``; dims before it are copied, dims after it are flattened);
2. ``amax = ReduceMax(Abs(xg))`` over the block, and a finiteness probe
   ``ReduceSum(xg * 0)`` (0 for a finite block, NaN where it holds NaN or Inf);
3. the shared scale from :mod:`.shared_scale` (NaN for a non-finite block, via the probe);
4. ``xg / scale`` rounded onto the element grid (:mod:`.element_round`), times ``scale``;
5. back to the padded shape and ``Slice`` the padding off.

With a per-tensor scale (``spec.tensor_scale``, NVFP4), computed first from the whole tensor:
``g = Max(ReduceMax(Abs(x)) / (max_sf * max_normal), 2**-126)`` (2688 for NVFP4; NaN when ``x``
holds NaN or Inf, by a whole-tensor probe), block scales ``round_sf(clamp((amax / max_normal) / g,
min_sf, max_sf))``, elements ``round(xg * ((1 / g) / scale))`` and output ``(q * scale) * g``: the
operations and their order of ``groupquant.ops.shared_scale``, so the result is bit-exact.
"""
from __future__ import annotations

import dataclasses

import torch

from ...core import QuantSpec
from ...ops import OpSettings
from ...ops.shared_scale import MIN_TENSOR_SCALE, tensor_scale_divisor
from .builder import GraphBuilder
from .element_round import round_elements_of
from .shared_scale import shared_scale_of

__all__ = ["dynamic_fake_quant_of", "tensor_scale_of"]


def tensor_scale_of(b: GraphBuilder, x: str, settings: OpSettings):
    """The per-tensor scale of ``x`` under the op ``settings`` as ``(g, g_finite)``: ``g`` is NaN when
    ``x`` holds NaN or Inf, ``g_finite`` is the same value with that case replaced by a finite one (for
    the block scales, which are NaN there anyway)."""
    probe = b.node("ReduceSum", [b.node("Mul", [x, b.const(0.0)])], hint="tensor_probe", keepdims=0)
    amax = b.node("ReduceMax", [b.node("Abs", [x])], hint="tensor_amax", keepdims=0)
    amax = b.node("Where", [b.node("IsNaN", [probe]), b.const(0.0), amax], hint="tensor_amax_finite")
    divisor = tensor_scale_divisor(settings.fmt, settings.scale_format)
    g_finite = b.node("Max", [b.node("Div", [amax, b.const(float(divisor))]), b.const(float(MIN_TENSOR_SCALE))],
                      hint="tensor_scale_finite")
    return b.node("Add", [g_finite, probe], hint="tensor_scale"), g_finite


def _op_settings(spec: QuantSpec, rank: int, dim_size: int) -> OpSettings:
    """``spec.op_settings(rank)``; a hand-built group spec without a ``group_size`` (one group of the
    whole dim, as the ops read ``block_size=None``) as one group of ``dim_size``, which is the same."""
    if spec.is_group and spec.group_size is None:
        spec = dataclasses.replace(spec, group_size=max(int(dim_size), 1))
    return spec.op_settings(rank)


def dynamic_fake_quant_of(b: GraphBuilder, x: str, rank: int, dim_size: int, spec: QuantSpec) -> str:
    """Append the subgraph quantizing float32 ``x`` (``rank`` dims, ``dim_size`` along the spec's
    group dim) by a dynamic group ``spec`` (format, group size, group dim, scale mode); returns its output.
    The op's arguments are the spec's :meth:`~groupquant.core.QuantSpec.op_settings` (a ValueError
    naming ``group_dim`` when it is out of range for ``rank``)."""
    settings = _op_settings(spec, rank, dim_size)
    d = settings.dim
    g = g_finite = None
    if settings.tensor_scale:
        g, g_finite = tensor_scale_of(b, x, settings)
    layout = settings.layout_of([dim_size if i == d else 1 for i in range(rank)])  # (only the grouped dim's size)
    k, block, pad = layout.num_groups, layout.block_size, layout.pad
    if pad:
        pads = [0] * (2 * rank)
        pads[rank + d] = pad
        x = b.node("Pad", [x, b.ints(pads)], hint="padded")
    padded_shape = b.node("Shape", [x])
    target = [0] * d + [k, block] + ([-1] if d < rank - 1 else [])
    xg = b.node("Reshape", [x, b.ints(target)], hint="grouped")
    axes = b.ints([d + 1])
    amax = b.node("ReduceMax", [b.node("Abs", [xg]), axes], hint="amax", keepdims=1)
    probe = b.node("ReduceSum", [b.node("Mul", [xg, b.const(0.0)]), axes], hint="finite_probe", keepdims=1)
    amax = b.node("Where", [b.node("IsNaN", [probe]), b.const(0.0), amax], hint="amax_finite")
    block_scale = shared_scale_of(b, amax, settings.fmt, settings.scale_rule, settings.scale_format, g_finite)
    scale = b.node("Add", [block_scale, probe], hint="scale")
    if g is None:
        scaled = b.node("Div", [xg, scale], hint="scaled")
    else:  # xg * min((1 / g) / scale, float32 max), as the reference computes it
        inv = b.node("Div", [b.node("Div", [b.const(1.0), g]), scale])
        inv = b.node("Min", [inv, b.const(float(torch.finfo(torch.float32).max))], hint="inv_scale")
        scaled = b.node("Mul", [xg, inv], hint="scaled")
    elements = round_elements_of(b, scaled, settings.fmt)
    out = b.node("Mul", [elements, scale])
    if g is not None:
        out = b.node("Mul", [out, g])
    out = b.node("Reshape", [out, padded_shape], hint="fq")
    if pad:
        out = b.node("Slice", [out, b.ints([0]), b.ints([dim_size]), b.ints([d])], hint="fq")
    return out
