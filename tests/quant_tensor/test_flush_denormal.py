"""Quant tensors give the op's codes whatever torch.set_flush_denormal says (issue 17, item 13):
their codes and element values are recovered from dequantized values that may be subnormal (tiny
NVFP4 blocks under the per-tensor scale, E8M0 scales of 2**-127)."""
from __future__ import annotations

import pytest
import torch

import groupquant as gq
from groupquant.core import build_tensor_quant
from groupquant.quant_tensor import quant_tensor_from_output
from groupquant.quantizers import MXFloat4e2m1Weight, MXInt8Weight, NVFP4Weight, quantizer_spec


def _flush_supported() -> bool:
    try:
        return bool(torch.set_flush_denormal(True))
    finally:
        torch.set_flush_denormal(False)


pytestmark = pytest.mark.skipif(not _flush_supported(), reason="this CPU cannot flush denormals")


def _tiny_weight(fmt: str) -> torch.Tensor:
    """NVFP4: rows from 1e-36 down to 1e-39 (blocks whose dequantized values are float32 subnormals
    under the per-tensor scale); MX: rows near 2**-120 and below (E8M0 scale 2**-127, subnormal)."""
    gen = torch.Generator().manual_seed(0)
    top, bottom = (-36.0, -39.0) if fmt == "nvfp4" else (-36.0, -40.0)
    return torch.randn(8, 64, generator=gen) * torch.logspace(top, bottom, 8)[:, None]


@pytest.mark.parametrize("quant, fmt", [(NVFP4Weight, "nvfp4"), (MXFloat4e2m1Weight, "fp4_e2m1"),
                                        (MXInt8Weight, "int8")])
@pytest.mark.parametrize("flush", [False, True])
def test_quant_tensor_codes_equal_quantize_with_flush_denormal(quant, fmt, flush):
    w = _tiny_weight(fmt)
    spec = quantizer_spec(quant).with_dims(1, 0)
    want = gq.quantize(w, fmt, dim=1)  # the op's codes, computed with flushing off
    torch.set_flush_denormal(flush)
    try:
        qt = quant_tensor_from_output(build_tensor_quant(spec)(w), spec)
        codes, grouped = qt.codes(), qt.to_group_quantized()
    finally:
        torch.set_flush_denormal(False)
    assert torch.equal(codes, want.layout.expand(want.codes))
    assert torch.equal(grouped.scale_codes, want.scale_codes)
