"""microxcaling's MX quantizer written block by block in PyTorch, the reference the route tests
compare the compat layers with (moved here from the compat package, which now quantizes through
``groupquant.fake_quant`` only)."""
from __future__ import annotations

import torch

from groupquant.formats import ElementFormat
from groupquant.ops.bits import exp2i, floor_log2
from groupquant.ops.element_round import round_to_format
from groupquant.ops.group_layout import GroupLayout


def _block_exponent(amax: torch.Tensor, float_log2: bool) -> torch.Tensor:
    """floor(log2(amax)) per block as float32: exact (exponent bits) or from a float log2 in amax's dtype."""
    if float_log2:
        guarded = amax + (amax == 0).to(amax.dtype) * 2.0 ** -126
        return torch.floor(torch.log2(guarded)).float()
    e = floor_log2(amax).float()
    e = torch.where(amax == 0, torch.full_like(e, -126.0), e)
    return torch.where(torch.isfinite(amax), e, torch.full_like(e, float("inf")))


def quantize_mx_blocks(x: torch.Tensor, fmt: ElementFormat, block_size: int, axis: int, rounding: str,
                       scale_bits: int = 8, shared_exp_from_float_log2: bool = False,
                       flush_fp32_subnorms: bool = False) -> torch.Tensor:
    """MX fake quantization of ``x`` (x's dtype out): shared exponent ``floor(log2(amax)) - emax``
    (exact, or from a float log2), NaN above ``2**(scale_bits-1) - 1``, clamped below at its
    negative; elements by ``round_to_format`` (saturating). With ``flush_fp32_subnorms`` a block
    whose exponent is below -126 becomes zero. ``block_size`` 0 means the whole axis."""
    layout = GroupLayout.build(x.shape, axis, block_size or None)
    blocks = layout.contract(x).float()
    amax = blocks.abs().amax(dim=layout.reduce_dim, keepdim=True)
    e = _block_exponent(amax.to(x.dtype), shared_exp_from_float_log2)
    if flush_fp32_subnorms:
        blocks = blocks * (e > -127).float()
    shared = e - fmt.emax
    limit = 2 ** (scale_bits - 1) - 1
    shared = torch.where(shared > limit, torch.full_like(shared, float("nan")), shared.clamp(min=-limit))
    nan = torch.isnan(shared) | torch.isnan(amax)
    k = torch.where(nan, torch.zeros_like(shared), shared).to(torch.int32)
    elems = round_to_format(blocks * exp2i(-k), fmt, rounding)
    out = torch.where(nan, torch.full_like(elems, float("nan")), elems * exp2i(k))
    return layout.expand(out).to(x.dtype)
