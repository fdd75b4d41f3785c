"""Rounding scaled values onto an element grid inside an ONNX graph, equal to
:func:`groupquant.ops.round_to_format` with ``rounding='even'`` bit for bit.

- OCP FP8 (E4M3, E5M2): ``QuantizeLinear`` to float8e4m3fn / float8e5m2 with ``saturate=1``
  (round to nearest even, subnormals kept, clamp to +-max normal), then ``DequantizeLinear``;
  scale 1, so no arithmetic happens besides the cast.
- Integers (MXINT8 included): ``Round(y * 2**frac)`` clipped to ``[qmin, qmax]``, times
  ``2**-frac``. Not an int8 QuantizeLinear/DequantizeLinear pair: its integer zero loses the
  sign of a negative value that rounds to zero, which torch keeps (-0.0).
- Every other minifloat (FP6, FP4, ..., which onnxruntime has no cast for; also the FNUZ FP8
  forms, whose cast turns -0.0 into +0.0 where torch keeps -0.0): exact arithmetic.
  The quantum ``2**(max(floor(log2|y|), emin) - M)`` is picked by comparing ``|y|`` with
  each binade boundary ``2**j`` (``emin < j <= emax``), then ``Round(y / quantum) * quantum``
  clipped to +-max normal. ``Round`` is half to even.
"""
from __future__ import annotations

import torch
from onnx import TensorProto

from ..formats import ElementFormat, FloatFormat, IntFormat
from ..packing.storage_dtypes import element_storage_dtype
from .onnx_builder import GraphBuilder

__all__ = ["round_elements_of", "onnx_float8_type"]


def onnx_float8_type(fmt: ElementFormat):
    """The ONNX float8 type with exactly ``fmt``'s encoding (OCP E4M3 / E5M2 and their FNUZ forms), or None."""
    if not isinstance(fmt, FloatFormat):
        return None
    return {torch.float8_e4m3fn: TensorProto.FLOAT8E4M3FN, torch.float8_e5m2: TensorProto.FLOAT8E5M2,
            torch.float8_e4m3fnuz: TensorProto.FLOAT8E4M3FNUZ,
            torch.float8_e5m2fnuz: TensorProto.FLOAT8E5M2FNUZ}.get(element_storage_dtype(fmt))


def _round_float8(b: GraphBuilder, y: str, onnx_type: int) -> str:
    """QuantizeLinear (saturating) to the float8 type and DequantizeLinear back, scale 1."""
    one = b.const(1.0)
    zero = b.raw_initializer(b"\x00", onnx_type, [], hint="zp_f8")
    q = b.node("QuantizeLinear", [y, one, zero], hint="q", saturate=1)
    return b.node("DequantizeLinear", [q, one, zero], hint="elements")


def _round_int(b: GraphBuilder, y: str, fmt: IntFormat) -> str:
    step = 2.0 ** -fmt.frac_bits
    low, high = fmt.qmin * step, fmt.qmax * step
    n = b.node("Round", [b.node("Mul", [y, b.const(float(2.0 ** fmt.frac_bits))])])
    v = b.node("Mul", [n, b.const(step)])
    return b.node("Clip", [v, b.const(float(low)), b.const(float(high))], hint="elements")


def _round_minifloat(b: GraphBuilder, y: str, fmt: FloatFormat) -> str:
    m = fmt.mantissa_bit_width
    a = b.node("Abs", [y])
    quantum = b.const(float(2.0 ** (fmt.emin - m)))
    for j in range(fmt.emin + 1, fmt.emax + 1):
        above = b.node("GreaterOrEqual", [a, b.const(float(2.0 ** j))])
        quantum = b.node("Where", [above, b.const(float(2.0 ** (j - m))), quantum], hint="quantum")
    v = b.node("Mul", [b.node("Round", [b.node("Div", [y, quantum])]), quantum])
    low = -fmt.max_normal if fmt.signed else 0.0
    return b.node("Clip", [v, b.const(float(low)), b.const(float(fmt.max_normal))], hint="elements")


def round_elements_of(b: GraphBuilder, y: str, fmt: ElementFormat) -> str:
    """Element values (float32) of scaled values ``y`` (float32), rounded half to even and saturated."""
    if isinstance(fmt, IntFormat):
        return _round_int(b, y, fmt)
    f8 = onnx_float8_type(fmt)
    if f8 in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2):
        return _round_float8(b, y, f8)
    return _round_minifloat(b, y, fmt)
