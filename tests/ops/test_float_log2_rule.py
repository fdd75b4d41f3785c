"""The scale rule ``float_log2`` (microxcaling's block exponent, ``floor(torch.log2(amax))`` in the
input's dtype) against an oracle: the exponent from torch.log2 written out here, the elements from
the numpy / ml_dtypes oracle of tests/ops/mx_oracle.py; amax just below, at and above powers of two."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import mx_oracle
from groupquant import fake_quant, quantize
from groupquant.formats import ExponentScale
from groupquant.ops import kernel_params, reference
from groupquant.ops.api import make_spec


def _amaxes(dtype: torch.dtype) -> torch.Tensor:
    """Values of ``dtype`` just below, at and just above 2**k for k over the element and scale ranges."""
    powers = torch.tensor([2.0 ** k for k in range(-20, 16)], dtype=dtype)
    below = torch.nextafter(powers, torch.zeros_like(powers))
    above = torch.nextafter(powers, torch.full_like(powers, float("inf")))
    return torch.cat([below, powers, above])


def _below(v: float) -> float:
    """The float32 just below ``v``."""
    return torch.nextafter(torch.tensor(v), torch.tensor(0.0)).item()


def _blocks(amax: torch.Tensor) -> torch.Tensor:
    """One block of 8 per amax: amax itself, then fixed fractions of it (in amax's dtype)."""
    fractions = torch.tensor([1.0, -0.73, 0.5, 0.31, -0.12, 0.9, 0.05, 0.0])
    return (amax.float()[:, None] * fractions).to(amax.dtype)


def _oracle(x: torch.Tensor, fmt: str, exponent_bits: int = 8, flush: bool = False) -> np.ndarray:
    """microxcaling's MX quantization of ``x`` (rows are blocks): e = floor(torch.log2(amax)) in x's
    dtype (zero read as 2**-126), flushed below -126 when asked; shared = e - emax, NaN above the
    scale format's bias, clamped below at -bias; elements rounded by the oracle (nearest even)."""
    amax = x.abs().amax(dim=1)
    guard = (amax == 0).to(x.dtype) * 2.0 ** -126
    e = torch.floor(torch.log2(amax + guard)).double().numpy()
    o = mx_oracle.MX[fmt]
    bias = 2 ** (exponent_bits - 1) - 1
    xs = x.double().numpy()
    if flush:
        xs = xs * (e > -127)[:, None]
    shared = e - o.emax
    nan = shared > bias
    scale = np.ldexp(1.0, np.clip(np.where(nan, 0, shared), -bias, None).astype(np.int64))[:, None]
    out = mx_oracle.round_elements(xs / scale, o) * scale
    out[nan] = np.nan
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "int8"])
def test_float_log2_is_microxcaling_exponent_bit_for_bit(dtype, fmt):
    x = _blocks(_amaxes(dtype))
    sf = ExponentScale(8, saturating=False)
    got = fake_quant(x, fmt, 8, scale_mode="float_log2", scale_format=sf)
    want = torch.from_numpy(_oracle(x, fmt)).to(dtype)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
    if dtype == torch.float32 and fmt == "fp8_e4m3":  # the premise: some blocks differ from the floor rule
        assert not torch.equal(got, fake_quant(x, fmt, 8, scale_format=sf))


def test_float_log2_rounds_up_just_below_a_power_of_two():
    """amax = nextafter(8, 0) in fp8_e4m3: floor gives 2**(2-8) (amax saturates to 7.0); float_log2
    gives 2**(3-8) (amax rounds to 8.0), microxcaling's result; the codes say the same."""
    x = torch.zeros(1, 32)
    x[0, 0] = _below(8.0)
    assert fake_quant(x, "fp8_e4m3", scale_mode="float_log2")[0, 0].item() == 8.0
    assert fake_quant(x, "fp8_e4m3")[0, 0].item() == 7.0
    q = quantize(x, "fp8_e4m3", scale_mode="float_log2")
    assert q.scale_codes.to(torch.int32).item() == 127 + 3 - 8 and torch.equal(q.dequantize(), fake_quant(
        x, "fp8_e4m3", scale_mode="float_log2"))


@pytest.mark.parametrize("bits", [4, 8])
def test_narrow_scale_and_flush_follow_the_float_exponent(bits):
    """scale_bits-style E{k}M0 (NaN above, clamped below) and the flush of blocks whose float log2
    is below -126 (amax just below 2**-126 rounds up to -126 in float32 and is kept)."""
    amax = torch.tensor([2.0 ** -126, _below(2.0 ** -126), 2.0 ** -127, 2.0 ** -130, 0.0,
                         2.0 ** 10, _below(2.0 ** 12), 3.0e38, torch.finfo(torch.float32).max])
    x = _blocks(amax)
    sf = ExponentScale(bits, saturating=False, flush_subnormal_blocks=True)
    for fmt in ("fp8_e4m3", "int8"):
        got = fake_quant(x, fmt, 8, scale_mode="float_log2", scale_format=sf)
        want = torch.from_numpy(_oracle(x, fmt, bits, flush=True)).float()
        assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
    assert sf.keeps(amax, "float_log2").tolist()[:5] == [True, True, False, False, False]
    assert sf.keeps(amax).tolist()[:5] == [True, False, False, False, False]  # the exact rules flush it


def test_native_kernels_refuse_float_log2_by_name():
    """The kernels' record refuses the rule; fake_quant and quantize take the reference for it."""
    x = torch.randn(4, 64)
    spec = make_spec(x, "fp8_e4m3", 32, scale_mode="float_log2")
    with pytest.raises(ValueError, match="scale_mode='float_log2' has no native kernel"):
        kernel_params.kernel_params(spec, x.dtype)
    assert torch.equal(fake_quant(x, "fp8_e4m3", scale_mode="float_log2"), reference.reference_fake_quant(x, spec)[0])
