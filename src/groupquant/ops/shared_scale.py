"""The shared scale of a group: scale rules, scale formats, the per-tensor second scale.

Power-of-two rules (the scale is ``2**e``, stored in an exponent format E{k}M0, E8M0 for MX). For a
group with largest magnitude ``amax`` and an element format whose largest binade is ``emax``
(OCP's emax_elem):

- ``floor`` (OCP MX v1.0 default): ``e = floor(log2(amax)) - emax``.
- ``ceil``: ``e = ceil(log2(amax)) - emax`` (nothing saturates, one binade of range lost).
- ``even``: round amax to the element's mantissa width (nearest-even) first, then ``floor``.
- ``rceil``: ``e = ceil(log2(amax / max_normal))``, the smallest scale that avoids saturation.
- ``float_log2`` (microxcaling's): ``e = floor(torch.log2(amax)) - emax`` with the log2 computed in
  the input's dtype, which rounds up to ``k`` for an amax just below ``2**k`` (float32:
  ``nextafter(2**k, 0)``, k >= 2), so such a block gets twice the ``floor`` scale; with
  ``flush_subnormal_blocks`` a block is flushed when that float log2 is below -126, and the cap
  below is one binade higher. PyTorch reference only: the native kernels refuse it
  (:data:`~groupquant.formats.REFERENCE_RULES`), so ``fake_quant`` / ``quantize`` take the reference.

The first four are computed exactly from exponent bits, clamped to the scale format's [-bias, bias]
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

import struct
from typing import Optional, Tuple

import torch

from ..formats.bits import divide
from ..formats import (E8M0, SCALE_RULES, ElementFormat, ExponentScale, FloatScale, ScaleFormat,
                       default_scale_format)

__all__ = ["SCALE_MODES", "shared_exponent", "group_scale", "exponent_cap", "default_scale_format",
           "e8m0_encode", "e8m0_decode", "tensor_scale_divisor", "tensor_scale_of", "MIN_TENSOR_SCALE", "encode_scale",
           "decode_scale"]

#: The scale rules (:data:`groupquant.formats.SCALE_RULES`) under the functional ops' keyword name.
SCALE_MODES = SCALE_RULES

#: Smallest per-tensor scale, float32's smallest normal (keeps 1 / g finite).
MIN_TENSOR_SCALE = 2.0 ** -126


def exponent_cap(dtype: torch.dtype, fmt: ElementFormat, scale_format: ExponentScale = E8M0) -> int:
    """Largest shared exponent for input of ``dtype``: floor(log2(dtype max)) - emax, within the scale format."""
    return scale_format.exponent_cap(dtype, fmt)


def shared_exponent(amax: torch.Tensor, fmt: ElementFormat, rule: str, dtype: torch.dtype = torch.float32,
                    scale_format: ExponentScale = E8M0) -> torch.Tensor:
    """The shared exponent (int32) for finite, non-negative ``amax`` of input dtype ``dtype``
    (:meth:`groupquant.formats.ExponentScale.shared_exponent`): clamped to [-bias, :func:`exponent_cap`]
    of ``scale_format``; zero amax gives -bias."""
    return scale_format.shared_exponent(amax, fmt, rule, dtype)


def tensor_scale_divisor(fmt: ElementFormat, scale_format: FloatScale) -> float:
    """``max_sf * max_normal`` (448 * 6 = 2688 for NVFP4), exact in float32."""
    d = scale_format.max_value * fmt.max_normal
    if struct.unpack("f", struct.pack("f", d))[0] != d:  # (no tensor: this runs on every call)
        raise ValueError(f"tensor scale divisor {d} of {fmt.name} with {scale_format.name} is not exact in float32")
    return d


def tensor_scale_of(x: torch.Tensor, fmt: ElementFormat, scale_format: FloatScale) -> torch.Tensor:
    """The per-tensor second scale ``g`` of ``x`` (float32, 0-d, on x's device); see the module doc.

    ``max(amax(|x|) / divisor, 2**-126)``; NaN when x holds NaN or Inf."""
    if x.numel() == 0:
        return torch.ones((), dtype=torch.float32, device=x.device)
    lo, hi = torch.aminmax(x.detach())
    amax = torch.maximum(hi.float(), -lo.float())  # NaN propagates
    g = divide(amax, tensor_scale_divisor(fmt, scale_format)).clamp_min(MIN_TENSOR_SCALE)  # IEEE on CUDA too
    return torch.where(torch.isfinite(amax), g, torch.full_like(g, float("nan")))


def group_scale(amax: torch.Tensor, fmt: ElementFormat, rule: str, dtype: torch.dtype = torch.float32,
                scale_format: Optional[ScaleFormat] = None,
                tensor_scale: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scale (float32) and its code (uint8) from per-group amax, by the scale rule ``rule`` in ``scale_format``.

    ``dtype`` is the dtype of the data being quantized (it caps power-of-two exponents, see the
    module doc); ``tensor_scale`` is the per-tensor ``g`` (two-level scaling) or None. Codes are the
    scale format's (E{k}M0 exponent codes, minifloat codes; all 0 for float32 / bfloat16). A group
    with NaN or Inf (or any group under a NaN ``g``) gets a NaN scale and the NaN code; the finite
    groups get the scale format's :meth:`block_scale`.
    ``scale_format`` None: float32 for ``rule='float'``, else E8M0.
    """
    if scale_format is None:
        scale_format = default_scale_format(rule)
    amax = amax.float()
    finite = torch.isfinite(amax)
    g = None
    if tensor_scale is not None:
        g_finite = torch.isfinite(tensor_scale)
        finite = finite & g_finite
        g = torch.where(g_finite, tensor_scale, torch.ones_like(tensor_scale))
    safe = torch.where(finite, amax, torch.zeros_like(amax))
    scale, codes = scale_format.block_scale(safe, fmt, rule, dtype, g)
    nan_code = scale_format.nan_code
    if nan_code is not None:
        codes = torch.where(finite, codes, torch.full_like(codes, nan_code))
    scale = torch.where(finite, scale, torch.full_like(scale, float("nan")))
    return scale, codes


def e8m0_encode(scale: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 codes of power-of-two scales in [2**-127, 2**127]; NaN -> 0xFF.

    Raises ValueError if a finite scale is not an exact power of two in range.
    """
    return E8M0.encode(scale)


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """float32 scales 2**(code - 127) from uint8 E8M0 codes; 0xFF -> NaN."""
    if codes.dtype != torch.uint8:
        raise TypeError(f"E8M0 codes must be uint8, got {codes.dtype}")
    return E8M0.decode(codes)


def encode_scale(scale: torch.Tensor, scale_format: ScaleFormat) -> Optional[torch.Tensor]:
    """uint8 codes of ``scale`` (values of ``scale_format``; NaN -> its NaN code), or None for
    float32 / bfloat16 scale formats (their values are stored as they are).

    Raises ValueError if a finite scale is not a value of the format."""
    return scale_format.encode(scale)


def decode_scale(codes: torch.Tensor, scale_format: ScaleFormat) -> torch.Tensor:
    """float32 scales of integer ``codes`` in a coded scale format (E{k}M0: ``2**(c - bias)``;
    minifloats: their value). The NaN code, and codes the format does not have (beyond its width,
    e.g. UE4M3 bytes with the sign bit set), give NaN. ValueError for float32 / bfloat16 formats."""
    return scale_format.decode(codes)
