"""Rounding scaled values onto an element grid inside an ONNX graph, equal to
:func:`groupquant.ops.round_to_format` with ``rounding='even'`` bit for bit.

- OCP FP8 (E4M3, E5M2): ``QuantizeLinear`` to float8e4m3fn / float8e5m2 with ``saturate=1``
  (round to nearest even, subnormals kept, clamp to +-max normal), then ``DequantizeLinear``;
  scale 1, so no arithmetic happens besides the cast.
- Integers (MXINT8 included): ``Round(y * 2**frac)`` clipped to ``[qmin, qmax]``, times
  ``2**-frac``.
- Every other minifloat (FP6, FP4, ..., which onnxruntime has no cast for; also the FNUZ FP8
  forms): exact arithmetic.
  The quantum ``2**(max(floor(log2|y|), emin) - M)`` is picked by comparing ``|y|`` with
  each binade boundary ``2**j`` (``emin < j <= emax``), then ``Round(y / quantum) * quantum``
  clipped to +-max normal. ``Round`` is half to even.
Formats with no negative zero (integers, unsigned and FNUZ minifloats) give +0 where a negative
value rounds to zero, as the reference does: ``Where(v == 0, +0, v)`` (an ``Add(v, 0)`` would
do in IEEE arithmetic, but graph optimizers may fold it away).
"""
from __future__ import annotations

import torch
from onnx import TensorProto

from ...formats import ElementFormat, FloatFormat, IntFormat, SpecialValues
from ...packing.storage_dtypes import element_storage_dtype
from .builder import GraphBuilder

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


def _has_negative_zero(fmt: ElementFormat) -> bool:
    """Whether the format encodes -0 (signed minifloats other than FNUZ)."""
    return isinstance(fmt, FloatFormat) and fmt.signed and fmt.special_values is not SpecialValues.FNUZ


def round_elements_of(b: GraphBuilder, y: str, fmt: ElementFormat) -> str:
    """Element values (float32) of scaled values ``y`` (float32), rounded half to even and saturated."""
    f8 = onnx_float8_type(fmt)
    if isinstance(fmt, IntFormat):
        v = _round_int(b, y, fmt)
    elif f8 in (TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E5M2):
        v = _round_float8(b, y, f8)
    else:
        v = _round_minifloat(b, y, fmt)
    if _has_negative_zero(fmt):
        return v
    zero = b.const(0.0)
    return b.node("Where", [b.node("Equal", [v, zero]), zero, v], hint="positive_zero")
