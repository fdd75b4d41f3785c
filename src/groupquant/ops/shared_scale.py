"""The shared scale of a group: scale rules, scale formats, the per-tensor second scale.

Power-of-two rules (the scale is ``2**e``, stored in an exponent format E{k}M0, E8M0 for MX). For a
group with largest magnitude ``amax`` and an element format whose largest binade is ``emax``
(OCP's emax_elem):

- ``floor`` (OCP MX v1.0 default): ``e = floor(log2(amax)) - emax``.
- ``ceil``: ``e = ceil(log2(amax)) - emax`` (nothing saturates, one binade of range lost).
- ``even``: round amax to the element's mantissa width (nearest-even) first, then ``floor``.
- ``rceil``: ``e = ceil(log2(amax / max_normal))``, the smallest scale that avoids saturation.

All are computed exactly from exponent bits, clamped to the scale format's [-bias, bias]
([-127, 127] for E8M0; microxcaling's ``scale_bits`` clamps the same way, except that it turns an
exponent above the top into NaN where groupquant saturates) and capped at ``dtype_emax - emax``
(127 - emax for float32/bfloat16 input, 15 - emax for float16): the largest exponent ``floor`` can
reach for that dtype, so that ``ceil``/``even``/``rceil`` never turn a finite block near the
dtype's maximum into Inf (such a block saturates instead). An all-zero group gets ``2**-bias``
(code 0); a group with NaN or Inf gets a NaN scale (the all-ones code), which makes every element
of the group NaN, as the spec's X = NaN does.

The ``float`` rule (any float-valued scale format: float32, bfloat16, unsigned minifloats such as
UE4M3), in float32 arithmetic in this order::

    s = round_sf(clamp((amax / max_normal) / g, min_sf, max_sf))     # block scale
    q = round_elem(x * min((1 / g) / s, F32_MAX))   with a tensor scale g   # elements
    q = round_elem(x / s)                without one (a true division)
    dequantized = (q * s) * g            (q * s without one)

``round_sf`` is nearest-even onto the scale format (identity for float32); ``[min_sf, max_sf]`` is a
minifloat's normal range (UE4M3: [2**-6, 448]) or ``[0, max]`` for float32 / bfloat16, where a scale
that is still 0 (an all-zero block) becomes 1. This is NVFP4 as NVIDIA's kernels and torchao define
it (g = 1 without a tensor scale gives torchao's single-level variant).

Per-tensor second scale (two-level scaling, minifloat scale formats only):
``g = max(amax(|x|) / (max_sf * max_normal), 2**-126)`` in float32, ``448 * 6 = 2688`` for NVFP4.
The floor at float32's smallest normal keeps ``1 / g`` finite, and the multiplier ``(1 / g) / s``
saturates at float32's max ``F32_MAX`` (as TransformerEngine's ``fminf(..., FLT_MAX)``; it would be Inf
where ``g * s < 2**-128``, and ``0 * Inf`` NaN): an all-zero tensor gets
``g = 2**-126``, its block scales clamp to ``min_sf`` and every element is 0; a tensor whose amax
is below ``2688 * 2**-126`` (about 3e-35) is quantized with that floor instead of NaN. A tensor
holding NaN or Inf anywhere gets ``g = NaN``: every block scale (code: the scale format's NaN) and
every element is NaN.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch

from ..formats import E8M0, FLOAT32_SCALE, ElementFormat, ExponentScale, FloatScale, ScaleFormat, ScaleKind
from .bits import exp2i, floor_log2, significand
from .codes import decode, encode
from .element_round import round_to_format

__all__ = ["SCALE_MODES", "POWER_OF_TWO_MODES", "shared_exponent", "group_scale", "exponent_cap", "default_scale_format",
           "e8m0_encode", "e8m0_decode", "resolve_scale_mode", "check_tensor_scale", "tensor_scale_divisor",
           "tensor_scale_of", "MIN_TENSOR_SCALE", "encode_scale", "decode_scale"]

POWER_OF_TWO_MODES = ("floor", "ceil", "even", "rceil")
SCALE_MODES = POWER_OF_TWO_MODES + ("float",)

#: Smallest per-tensor scale, float32's smallest normal (keeps 1 / g finite).
MIN_TENSOR_SCALE = 2.0 ** -126


def default_scale_format(scale_mode: Optional[str]) -> ScaleFormat:
    """The scale format a rule implies when none is named: float32 for ``'float'``, else E8M0."""
    return FLOAT32_SCALE if scale_mode == "float" else E8M0


def resolve_scale_mode(scale_mode: Optional[str], scale_format: ScaleFormat) -> str:
    """The scale rule for ``scale_format``: ``scale_mode`` checked against it, or its default.

    Exponent formats (E8M0, E{k}M0) take the power-of-two rules (default ``floor``); float-valued
    formats (float32, bfloat16, UE4M3, ...) take ``float``. ValueError naming both settings for a
    rule the format cannot store."""
    if scale_mode is None:
        return "floor" if scale_format.is_power_of_two else "float"
    if scale_mode not in SCALE_MODES:
        raise ValueError(f"scale_mode must be one of {SCALE_MODES}, got {scale_mode!r}")
    if scale_format.is_power_of_two and scale_mode == "float":
        raise ValueError(
            f"scale_mode='float' computes amax / max_normal, which scale_format={scale_format.name!r} (powers of two "
            "only) cannot store; use a power-of-two rule (floor, ceil, even, rceil) or scale_format='float32' / 'ue4m3'")
    if not scale_format.is_power_of_two and scale_mode != "float":
        raise ValueError(
            f"scale_mode={scale_mode!r} is a power-of-two rule for exponent scale formats (e8m0, e{{k}}m0); "
            f"scale_format={scale_format.name!r} holds float scales: use scale_mode='float' (or leave it unset)")
    return scale_mode


def check_tensor_scale(tensor_scale: object, scale_format: ScaleFormat) -> bool:
    """``tensor_scale`` validated: a bool, True only with a minifloat scale format."""
    if not isinstance(tensor_scale, bool):
        raise TypeError(f"tensor_scale must be True or False, got {tensor_scale!r}")
    if tensor_scale and scale_format.kind is not ScaleKind.MINIFLOAT:
        raise ValueError(
            f"tensor_scale=True (a per-tensor float32 second scale) extends the range of a minifloat scale format "
            f"such as 'ue4m3'; scale_format={scale_format.name!r} needs none")
    return tensor_scale


def _round_significand_carry(amax: torch.Tensor, mantissa_bits: int) -> torch.Tensor:
    """1 where rounding amax's significand to ``mantissa_bits`` (nearest-even) carries into 2.0, else 0."""
    sig = significand(amax)  # [1, 2)
    steps = torch.round(sig * float(2 ** mantissa_bits))  # exact product, RNE
    return (steps >= 2 ** (mantissa_bits + 1)).to(torch.int32)


def exponent_cap(dtype: torch.dtype, fmt: ElementFormat, scale_format: ExponentScale = E8M0) -> int:
    """Largest shared exponent for input of ``dtype``: floor(log2(dtype max)) - emax, within the scale format."""
    dtype_emax = math.frexp(torch.finfo(dtype).max)[1] - 1
    return min(scale_format.max_exponent, dtype_emax - fmt.emax)


def shared_exponent(amax: torch.Tensor, fmt: ElementFormat, mode: str, dtype: torch.dtype = torch.float32,
                    scale_format: ExponentScale = E8M0) -> torch.Tensor:
    """The shared exponent (int32) for finite, non-negative ``amax`` of input dtype ``dtype``.

    Clamped to [-bias, :func:`exponent_cap`] of ``scale_format``; zero amax gives -bias.
    """
    amax = amax.float()
    e_a = floor_log2(amax)
    if mode == "floor":
        e = e_a - fmt.emax
    elif mode == "ceil":
        not_pow2 = (significand(amax) > 1.0).to(torch.int32)
        e = e_a + not_pow2 - fmt.emax
    elif mode == "even":
        e = e_a + _round_significand_carry(amax, fmt.mantissa_bit_width) - fmt.emax
    elif mode == "rceil":
        m_max, e_max = math.frexp(fmt.max_normal)
        e = e_a - (e_max - 1) + (significand(amax) > 2.0 * m_max).to(torch.int32)
    else:
        raise ValueError(f"scale_mode must be one of {POWER_OF_TWO_MODES} here, got {mode!r}")
    low = scale_format.min_exponent
    e = torch.where(amax > 0, e, torch.full_like(e, low))
    return e.clamp(low, exponent_cap(dtype, fmt, scale_format))


def tensor_scale_divisor(fmt: ElementFormat, scale_format: FloatScale) -> float:
    """``max_sf * max_normal`` (448 * 6 = 2688 for NVFP4), exact in float32."""
    d = scale_format.max_value * fmt.max_normal
    if float(torch.tensor(d, dtype=torch.float32)) != d:
        raise ValueError(f"tensor scale divisor {d} of {fmt.name} with {scale_format.name} is not exact in float32")
    return d


def tensor_scale_of(x: torch.Tensor, fmt: ElementFormat, scale_format: FloatScale) -> torch.Tensor:
    """The per-tensor second scale ``g`` of ``x`` (float32, 0-d, on x's device); see the module doc.

    ``max(amax(|x|) / divisor, 2**-126)``; NaN when x holds NaN or Inf."""
    if x.numel() == 0:
        return torch.ones((), dtype=torch.float32, device=x.device)
    lo, hi = torch.aminmax(x.detach())
    amax = torch.maximum(hi.float(), -lo.float())  # NaN propagates
    g = (amax / tensor_scale_divisor(fmt, scale_format)).clamp_min(MIN_TENSOR_SCALE)
    return torch.where(torch.isfinite(amax), g, torch.full_like(g, float("nan")))


def _float_block_scale(amax: torch.Tensor, fmt: ElementFormat, scale_format: FloatScale,
                       g: Optional[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Float-valued scales of finite ``amax`` (float32) and their codes (uint8; zeros unless minifloat)."""
    raw = amax / fmt.max_normal
    if g is not None:
        raw = raw / g
    kind = scale_format.kind
    s = raw.clamp(scale_format.min_value, scale_format.max_value)
    if kind is ScaleKind.BFLOAT16:
        s = s.to(torch.bfloat16).float()
    elif kind is ScaleKind.MINIFLOAT:
        s = round_to_format(s, scale_format.element, "even")
    s = torch.where(s > 0, s, torch.ones_like(s))
    if kind is ScaleKind.MINIFLOAT:
        codes = encode(s, scale_format.element).to(torch.uint8)
    else:
        codes = torch.zeros(s.shape, dtype=torch.uint8, device=s.device)
    return s, codes


def group_scale(amax: torch.Tensor, fmt: ElementFormat, mode: str, dtype: torch.dtype = torch.float32,
                scale_format: Optional[ScaleFormat] = None,
                tensor_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scale (float32) and its code (uint8) from per-group amax, by rule ``mode`` in ``scale_format``.

    ``dtype`` is the dtype of the data being quantized (it caps power-of-two exponents, see the
    module doc); ``tensor_scale`` is the per-tensor ``g`` (two-level scaling) or None. Codes are the
    scale format's (E{k}M0 exponent codes, minifloat codes; all 0 for float32 / bfloat16). A group
    with NaN or Inf (or any group under a NaN ``g``) gets a NaN scale and the NaN code.
    ``scale_format`` None: float32 for ``mode='float'``, else E8M0.
    """
    if scale_format is None:
        scale_format = default_scale_format(mode)
    amax = amax.float()
    finite = torch.isfinite(amax)
    if tensor_scale is not None:
        finite = finite & torch.isfinite(tensor_scale)
    safe = torch.where(finite, amax, torch.zeros_like(amax))
    if scale_format.is_power_of_two:
        e = shared_exponent(safe, fmt, mode, dtype, scale_format)
        scale = exp2i(e)
        codes = (e + scale_format.bias).to(torch.uint8)
    else:
        g = None if tensor_scale is None else torch.where(torch.isfinite(tensor_scale), tensor_scale,
                                                          torch.ones_like(tensor_scale))
        scale, codes = _float_block_scale(safe, fmt, scale_format, g)
    nan_code = scale_format.nan_code
    if nan_code is not None:
        codes = torch.where(finite, codes, torch.full_like(codes, nan_code))
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    return scale, codes


def e8m0_encode(scale: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 codes of power-of-two scales in [2**-127, 2**127]; NaN -> 0xFF.

    Raises ValueError if a finite scale is not an exact power of two in range.
    """
    scale = scale.float()
    nan = torch.isnan(scale)
    e = floor_log2(scale)
    ok = nan | ((scale > 0) & (significand(scale) == 1.0) & (e >= E8M0.min_exponent) & (e <= E8M0.max_exponent))
    if not bool(ok.all()):
        raise ValueError("e8m0_encode: scale must be NaN or a power of two in [2**-127, 2**127]")
    codes = (e + E8M0.bias).clamp(0, 254).to(torch.uint8)
    return torch.where(nan, torch.full_like(codes, E8M0.nan_code), codes)


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 scales 2**(code - 127) from uint8 E8M0 codes; 0xFF -> NaN."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"E8M0 codes must be uint8, got {codes.dtype}")
    return decode_scale(codes, E8M0)


def encode_scale(scale: torch.Tensor, scale_format: ScaleFormat) -> Optional[torch.Tensor]:
    """uint8 codes of ``scale`` (values of ``scale_format``; NaN -> its NaN code), or None for
    float32 / bfloat16 scale formats (their values are stored as they are).

    Raises ValueError if a finite scale is not a value of the format."""
    if not scale_format.is_coded:
        return None
    scale = scale.float()
    nan = torch.isnan(scale)
    if isinstance(scale_format, ExponentScale):
        e = floor_log2(scale)
        ok = nan | ((scale > 0) & (significand(scale) == 1.0) & (e >= scale_format.min_exponent)
                    & (e <= scale_format.max_exponent))
        codes = (e + scale_format.bias).clamp(0, 255).to(torch.uint8)
    else:
        el = scale_format.element
        ok = nan | ((scale >= el.min_normal) & (scale <= el.max_normal) & (round_to_format(scale, el, "even") == scale))
        codes = encode(torch.where(nan, torch.ones_like(scale), scale), el).to(torch.uint8)
    if not bool(ok.all()):
        raise ValueError(f"encode_scale: a scale is not a {scale_format.name} value (or NaN)")
    return torch.where(nan, torch.full_like(codes, scale_format.nan_code), codes)


def decode_scale(codes: torch.Tensor, scale_format: ScaleFormat) -> torch.Tensor:
    """float32 scales of integer ``codes`` in a coded scale format (E{k}M0: ``2**(c - bias)``;
    minifloats: their value). The NaN code, and codes the format does not have (beyond its width,
    e.g. UE4M3 bytes with the sign bit set), give NaN. ValueError for float32 / bfloat16 formats."""
    if not scale_format.is_coded:
        raise ValueError(f"scale_format {scale_format.name} is stored as values, not codes")
    c = codes.to(torch.int32)
    if isinstance(scale_format, ExponentScale):
        values = exp2i((c - scale_format.bias).clamp(-149, 127))
        bad = c >= scale_format.nan_code
    else:
        el = scale_format.element
        bad = (c < 0) | (c >= (1 << el.bit_width))
        values = decode(torch.where(bad, torch.zeros_like(c), c), el).to(torch.float32)
    return torch.where(bad, torch.full_like(values, float("nan")), values)
