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
lie on the E4M3 grid) because onnxruntime does not dequantize FLOAT4E2M1 and has no FP6 type
(onnxruntime 1.32 has no CPU kernel for DequantizeLinear or Cast of FLOAT4E2M1, opset 23).

Scales: one per group, shape ``S[:d] + (k,) + S[d+1:]`` (times ``2**-frac_bits`` for integer
codes, which read as fixed point), by the weight's scale format:

- E8M0 and E{k}M0: float32 ``2**e``; with ``scale_format='e8m0'`` (opset 24 and up) FLOAT8E8M0
  bytes (E{k}M0 codes re-biased to E8M0's 127; every E{k}M0 scale is an E8M0 value) followed by a
  ``Cast`` to float (onnxruntime's DequantizeLinear does not take E8M0 scales directly).
- UE4M3 (NVFP4): FLOAT8E4M3FN bytes (the same bytes: sign bit 0) followed by a ``Cast`` to float.
- bfloat16, float32 and other unsigned minifloats: float32 values (exact).

A per-tensor scale ``g`` (NVFP4's second level) is a float32 constant and a ``Mul`` after the
``DequantizeLinear``, so the graph computes ``(q * s) * g`` in groupquant's order: NVFP4 weights
are bit-exact.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from onnx import TensorProto

from ...formats import ElementFormat, FloatFormat, IntFormat, get_format
from ...ops import GroupQuantized, decode, encode, round_to_format
from ...ops.bitstream import pack_bits
from ...packing.storage_dtypes import scale_storage_dtype
from .builder import GraphBuilder
from .element_round import onnx_float8_type

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


def _e8m0_bytes(q: GroupQuantized) -> bytes:
    """E8M0 bytes of ``q``'s exponent scale codes (E{k}M0 re-biased to 127; its NaN code -> 0xFF)."""
    sf = q.scale_format
    c = q.scale_codes.squeeze(q.layout.reduce_dim).contiguous().to(torch.int32)
    e8m0 = torch.where(c == sf.nan_code, torch.full_like(c, 0xFF), c - sf.bias + 127)
    return e8m0.to(torch.uint8).cpu().numpy().tobytes()


def _coded_scale_bytes(q: GroupQuantized, scale_format: str):
    """(ONNX type, raw bytes) of scales stored as a float8 type and cast to float, or None for float32 values."""
    sf = q.scale_format
    if sf.is_power_of_two and q.scale_codes is not None:
        if scale_format != "e8m0":
            return None
        return TensorProto.FLOAT8E8M0, _e8m0_bytes(q)
    if scale_format == "e8m0":
        what = f"{sf.name} scales" if q.scale_codes is not None else "float scales"
        raise ValueError(f"scale_format='e8m0' needs power-of-two scales; this weight has {what}")
    if q.scale_codes is not None and scale_storage_dtype(sf) == torch.float8_e4m3fn:  # UE4M3: FP8 E4M3, sign 0
        return TensorProto.FLOAT8E4M3FN, q.scale_codes.squeeze(q.layout.reduce_dim).contiguous().cpu().numpy().tobytes()
    return None


def weight_dequant_of(b: GraphBuilder, q: GroupQuantized, hint: str, scale_format: str = "float32") -> str:
    """Append initializers and a blocked ``DequantizeLinear`` for ``q`` (and a ``Mul`` by its tensor
    scale, if any); returns the float32 weight's name. ``scale_format`` is how power-of-two scales are
    stored ('float32' or 'e8m0'); UE4M3 scales are always FLOAT8E4M3FN, other float scales float32."""
    if scale_format not in SCALE_FORMATS:
        raise ValueError(f"scale_format must be one of {SCALE_FORMATS}, got {scale_format!r}")
    if scale_format == "e8m0" and b.opset < E8M0_MIN_OPSET:
        raise ValueError(f"scale_format='e8m0' needs opset >= {E8M0_MIN_OPSET} (FLOAT8E8M0), got opset {b.opset}")
    elements = onnx_elements(q)
    codes = b.raw_initializer(elements.raw, elements.data_type, q.layout.shape, hint=f"{hint}_codes")
    scale = q.scale.float().squeeze(q.layout.reduce_dim).contiguous()
    step = _fixed_point_step(q.fmt)
    folds = _step_folds(scale, step)
    coded = _coded_scale_bytes(q, scale_format)
    if coded is not None:
        data_type, raw = coded
        name = "e8m0" if data_type == TensorProto.FLOAT8E8M0 else "e4m3"
        s = b.raw_initializer(raw, data_type, scale.shape, hint=f"{hint}_scale_{name}")
        s = b.node("Cast", [s], hint=f"{hint}_scale", to=TensorProto.FLOAT)
        if folds and step != 1.0:
            s = b.node("Mul", [s, b.const(step)], hint=f"{hint}_scale")
    else:
        values = scale * step if folds else scale
        s = b.const(values.numpy(), hint=f"{hint}_scale")
    w = b.node("DequantizeLinear", [codes, s], hint=f"{hint}_dq", axis=q.layout.dim, block_size=q.layout.block_size)
    if not folds:
        w = b.node("Mul", [w, b.const(step)], hint=f"{hint}_dq")
    if q.tensor_scale is not None:  # (q * s) * g, groupquant's order
        g = q.tensor_scale.detach().float().reshape(()).cpu().numpy()
        w = b.node("Mul", [w, b.const(g, hint=f"{hint}_tensor_scale")], hint=f"{hint}_dq")
    return w
