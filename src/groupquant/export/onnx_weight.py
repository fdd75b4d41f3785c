"""A quantized weight (:class:`~groupquant.ops.GroupQuantized`) as ONNX initializers and a blocked
``DequantizeLinear``, whose output equals ``q.dequantize()`` bit for bit.

Element codes are stored in the original shape (the padding of a last partial group dropped;
``DequantizeLinear`` accepts a partial last block) in an ONNX type that holds every element
value exactly and that onnxruntime's CPU provider dequantizes:

======================================  ===============================================
format                                  initializer type
======================================  ===============================================
int4 / uint4                            INT4 / UINT4 (two per byte, low nibble first)
other ints up to 8 bits (MXINT8: int8)  INT8 / UINT8 (the integer codes)
ints of 9 to 16 bits                    INT16 / UINT16
FP8 E4M3, E5M2 (OCP) and their FNUZ     FLOAT8E4M3FN, FLOAT8E5M2, FLOAT8E4M3FNUZ, FLOAT8E5M2FNUZ
FP6, FP4 and other minifloats           FLOAT8E4M3FN if every value is exact there, else
                                        FLOAT8E5M2; else unsupported (ValueError)
======================================  ===============================================

FP6 and FP4 codes are re-encoded as float8e4m3fn (lossless: E2M1, E2M3 and E3M2 values all
lie on the E4M3 grid) because onnxruntime does not dequantize FLOAT4E2M1 and has no FP6 type.

Scales: one per group, shape ``S[:d] + (k,) + S[d+1:]``, float32 ``2**e`` (times
``2**-frac_bits`` for integer codes, which read as fixed point). With ``scale_format='e8m0'``
(opset 24 and up) the scales are FLOAT8E8M0 bytes followed by a ``Cast`` to float
(onnxruntime's DequantizeLinear does not take E8M0 scales directly).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from onnx import TensorProto

from ..formats import ElementFormat, FloatFormat, IntFormat, get_format
from ..ops import GroupQuantized, decode, encode, round_to_format
from ..packing.bitstream import pack_bits
from .onnx_builder import GraphBuilder
from .onnx_element_round import onnx_float8_type

__all__ = ["OnnxElements", "onnx_elements", "weight_dequant_of", "SCALE_FORMATS", "E8M0_MIN_OPSET"]

SCALE_FORMATS = ("float32", "e8m0")
#: FLOAT8E8M0 exists from opset 24 on.
E8M0_MIN_OPSET = 24
_FLOAT8_FALLBACKS = ("fp8_e4m3", "fp8_e5m2")


@dataclass(frozen=True)
class OnnxElements:
    """Element codes ready for an initializer: ONNX data type and raw little-endian bytes."""

    data_type: int
    raw: bytes
    fmt: ElementFormat  # the format the bytes are encoded in (a float8 fallback for FP6/FP4)


def _holds_exactly(fmt: ElementFormat, target: FloatFormat) -> bool:
    """True when every finite value of ``fmt`` lies on ``target``'s grid, inside its range."""
    values = fmt.values().float()
    return bool(torch.equal(round_to_format(values, target), values))


def _int_elements(codes: torch.Tensor, fmt: IntFormat) -> OnnxElements:
    s = fmt.signed
    if fmt.bit_width == 4:
        return OnnxElements(TensorProto.INT4 if s else TensorProto.UINT4, pack_bits(codes, 4).numpy().tobytes(), fmt)
    if fmt.bit_width <= 8:
        dtype = torch.int8 if s else torch.uint8
        return OnnxElements(TensorProto.INT8 if s else TensorProto.UINT8, codes.to(dtype).numpy().tobytes(), fmt)
    return OnnxElements(TensorProto.INT16 if s else TensorProto.UINT16, pack_bits(codes, 16).numpy().tobytes(), fmt)


def onnx_elements(q: GroupQuantized) -> OnnxElements:
    """The element codes of ``q`` in the original shape, as an ONNX type onnxruntime dequantizes.

    Raises ValueError naming the format when no such type holds its values exactly.
    """
    fmt = q.fmt
    codes = q.layout.expand(q.codes).contiguous()
    if isinstance(fmt, IntFormat):
        return _int_elements(codes, fmt)
    f8 = onnx_float8_type(fmt)
    if f8 is not None:
        return OnnxElements(f8, codes.to(torch.uint8).numpy().tobytes(), fmt)
    for name in _FLOAT8_FALLBACKS:
        target = get_format(name)
        if _holds_exactly(fmt, target):
            recoded = encode(decode(codes, fmt), target)
            return OnnxElements(onnx_float8_type(target), recoded.numpy().tobytes(), target)
    raise ValueError(f"element format {fmt.name} has no ONNX type that onnxruntime dequantizes and that holds its "
                     "values exactly (int4/int8/int16, float8e4m3fn/e5m2 and their fnuz forms)")


def _fixed_point_step(fmt: ElementFormat) -> float:
    """The value of one integer code step (``2**-frac_bits``), 1 for float codes."""
    return 2.0 ** -fmt.frac_bits if isinstance(fmt, IntFormat) else 1.0


def _step_folds(scale: torch.Tensor, step: float) -> bool:
    """True when ``scale * step`` is exact in float32 for every group (no underflow), so the step can
    be folded into the DequantizeLinear scale; else the step is a separate ``Mul`` after it."""
    exact = scale.double() * step
    finite = torch.isfinite(exact)
    return bool(torch.equal(exact[finite].float().double(), exact[finite]))


def weight_dequant_of(b: GraphBuilder, q: GroupQuantized, hint: str, scale_format: str = "float32") -> str:
    """Append initializers and a blocked ``DequantizeLinear`` for ``q``; returns the float32 weight's name."""
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {SCALE_FORMATS}, got {scale_format!r}")
    elements = onnx_elements(q)
    codes = b.raw_initializer(elements.raw, elements.data_type, q.layout.shape, hint=f"{hint}_codes")
    scale = q.scale.float().squeeze(q.layout.reduce_dim).contiguous()
    step = _fixed_point_step(q.fmt)
    folds = _step_folds(scale, step)
    if scale_format == "e8m0":
        if b.opset < E8M0_MIN_OPSET:
            raise ValueError(f"scale_format='e8m0' needs opset >= {E8M0_MIN_OPSET} (FLOAT8E8M0), got opset {b.opset}")
        if q.scale_codes is None:
            raise ValueError("scale_format='e8m0' needs power-of-two scales; this weight has float scales")
        raw = q.scale_codes.squeeze(q.layout.reduce_dim).contiguous().numpy().tobytes()
        s = b.raw_initializer(raw, TensorProto.FLOAT8E8M0, scale.shape, hint=f"{hint}_scale_e8m0")
        s = b.node("Cast", [s], hint=f"{hint}_scale", to=TensorProto.FLOAT)
        if folds and step != 1.0:
            s = b.node("Mul", [s, b.const(step)], hint=f"{hint}_scale")
    else:
        values = scale * step if folds else scale
        s = b.const(values.numpy(), hint=f"{hint}_scale")
    w = b.node("DequantizeLinear", [codes, s], hint=f"{hint}_dq", axis=q.layout.dim, block_size=q.layout.block_size)
    if not folds:
        w = b.node("Mul", [w, b.const(step)], hint=f"{hint}_dq")
    return w
