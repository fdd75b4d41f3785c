"""Exact exponent arithmetic on float32 tensors: floor(log2|x|) and 2**k, with no float log2/pow.

A float log2 rounds up just below a power of two (log2(nextafter(2.0, 0)) == 1.0 in float32),
so the MX shared exponent is always taken from the exponent bits (frexp) instead; the one float
log2 here, :func:`float_log2_floor`, is microxcaling's exponent (the scale rule ``float_log2``).
"""
from __future__ import annotations

import torch

__all__ = ["floor_log2", "float_log2_floor", "exp2i", "significand", "divide"]


def floor_log2(x: torch.Tensor) -> torch.Tensor:
    """floor(log2(|x|)) as int32, exact for every finite non-zero float32 (subnormals included).

    Zero gives -1 (frexp's exponent 0 minus one); callers mask zeros themselves.
    """
    return torch.frexp(x.float())[1] - 1


def significand(x: torch.Tensor) -> torch.Tensor:
    """|x| / 2**floor_log2(x): the significand in [1, 2) as float32 (0 for zero), exact."""
    return torch.frexp(x.float().abs())[0] * 2.0


def exp2i(k: torch.Tensor) -> torch.Tensor:
    """2**k as float32 for integer k in [-149, 127], built from the bits (exact, subnormals too)."""
    k = k.to(torch.int32)
    normal = ((k + 127).clamp(min=1) << 23).view(torch.float32)
    sub = (torch.ones_like(k) << (k + 149).clamp(0, 22)).view(torch.float32)
    return torch.where(k >= -126, normal, sub)


def float_log2_floor(amax: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``floor(torch.log2(amax))`` as int32, the log2 computed in ``dtype`` (``amax``, a magnitude of
    that dtype, is exact in it), a zero amax read as float32's min normal: microxcaling's block
    exponent. It rounds up to ``k`` for an amax just below ``2**k`` (float32: ``nextafter(2**k, 0)``
    for k >= 2). Clamped to [-1000, 1000] so that a log2 of 0 (float16) converts to an int."""
    a = amax.to(dtype)
    guarded = a + (a == 0).to(dtype) * 2.0 ** -126
    return torch.floor(torch.log2(guarded)).float().clamp(-1000, 1000).to(torch.int32)


def divide(t: torch.Tensor, d: float) -> torch.Tensor:
    """``t / d`` as an IEEE division (correctly rounded in t's dtype) on every device.

    torch's CUDA kernel turns a division by a Python number into a multiplication by its
    reciprocal, one ulp off the quotient in some elements (NVFP4's tensor scale ``amax / 2688``
    differed from the CPU's, and so did every element scaled by it); a divisor on t's device is
    divided by. The kernels in ``csrc/`` divide in float32 themselves (``group_quant.h``).
    """
    return torch.div(t, t.new_full((), d))

