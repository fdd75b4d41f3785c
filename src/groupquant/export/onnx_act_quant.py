"""Dynamic group-wise fake quantization (activations) as an ONNX subgraph, equal to
``groupquant.fake_quant(x, fmt, block_size, dim, rounding='even', scale_mode=...)`` bit for bit.

Graph, for ``x`` of known rank with a known size ``C`` of the grouped dim:

1. zero-pad the grouped dim to a multiple of the block (``Pad``) and view it as ``(k, block)``
   (``Reshape``; dims before it are copied, dims after it are flattened);
2. ``amax = ReduceMax(Abs(xg))`` over the block, and a finiteness probe
   ``ReduceSum(xg * 0)`` (0 for a finite block, NaN where it holds NaN or Inf);
3. the shared scale from :mod:`.onnx_shared_scale` (NaN for a non-finite block, via the probe);
4. ``xg / scale`` rounded onto the element grid (:mod:`.onnx_element_round`), times ``scale``;
5. back to the padded shape and ``Slice`` the padding off.
"""
from __future__ import annotations

from ..core import QuantSpec
from .onnx_builder import GraphBuilder
from .onnx_element_round import round_elements_of
from .onnx_shared_scale import shared_scale_of

__all__ = ["dynamic_fake_quant_of"]


def dynamic_fake_quant_of(b: GraphBuilder, x: str, rank: int, dim_size: int, spec: QuantSpec) -> str:
    """Append the subgraph quantizing float32 ``x`` (``rank`` dims, ``dim_size`` along the spec's
    group dim) by a dynamic group ``spec`` (format, group size, group dim, scale mode); returns its output."""
    dim = -1 if spec.group_dim is None else spec.group_dim
    if not -rank <= dim < rank:
        raise ValueError(f"group_dim={dim} is out of range for an input with {rank} dimensions")
    d = dim % rank
    block = min(spec.group_size or dim_size, dim_size)
    k = -(-dim_size // block)
    pad = k * block - dim_size
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
    scale = b.node("Add", [shared_scale_of(b, amax, spec.fmt, spec.scale_mode), probe], hint="scale")
    elements = round_elements_of(b, b.node("Div", [xg, scale], hint="scaled"), spec.fmt)
    out = b.node("Reshape", [b.node("Mul", [elements, scale]), padded_shape], hint="fq")
    if pad:
        out = b.node("Slice", [out, b.ints([0]), b.ints([dim_size]), b.ints([d])], hint="fq")
    return out
