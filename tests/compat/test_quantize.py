"""quantize_mx_op / quantize_elemwise_op against independent compositions; the float-log2 option."""
from __future__ import annotations

import pytest
import torch

from groupquant import fake_quant
from groupquant.compat.microxcaling import MxSpecs, quantize_bfloat, quantize_elemwise_op, quantize_mx_op


def _block_with_max(value: float) -> torch.Tensor:
    x = torch.zeros(2, 32)
    x[:, 0] = value
    x[:, 1] = 1.3
    return x


def test_shared_exponent_exact_floor_vs_float_log2():
    # amax = nextafter(8, 0): exact floor(log2) = 2 -> scale 2**(2-8); 511.99.. saturates to 448 -> 7.0.
    # A float32 log2 rounds to 3.0 -> scale 2**(3-8); 255.99.. rounds to 256 -> 8.0 (microxcaling's value).
    just_below = torch.nextafter(torch.tensor(8.0), torch.tensor(0.0)).item()
    assert torch.log2(torch.tensor([just_below])).item() == 3.0  # the premise: float log2 rounds up
    x = _block_with_max(just_below)
    exact = quantize_mx_op(x, MxSpecs(block_size=32), "fp8_e4m3", axes=[-1])
    float_log2 = quantize_mx_op(x, MxSpecs(block_size=32, shared_exp_from_float_log2=True), "fp8_e4m3", axes=[-1])
    assert exact[0, 0].item() == 7.0 and float_log2[0, 0].item() == 8.0
    assert exact[0, 1].item() == float_log2[0, 1].item() == 1.25
    assert torch.equal(exact, fake_quant(x, "fp8_e4m3", 32, rounding="nearest"))
    by_argument = quantize_mx_op(x, MxSpecs(block_size=32), "fp8_e4m3", axes=[-1], shared_exp_from_float_log2=True)
    assert torch.equal(by_argument, float_log2)


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "int8", "int4", "int2"])
@pytest.mark.parametrize("rnd", ["nearest", "even", "floor"])
def test_mx_op_is_fake_quant_along_the_axis(fmt, rnd):
    torch.manual_seed(0)
    x = torch.randn(6, 40, 24) * 4
    specs = MxSpecs(block_size=16)
    assert torch.equal(quantize_mx_op(x, specs, fmt, axes=[1], round=rnd),
                       fake_quant(x, fmt, 16, dim=1, rounding=rnd))
    # the block path (used for scale_bits != 8 / float log2 / flush) agrees where the exponent is exact
    assert torch.equal(quantize_mx_op(x, MxSpecs(block_size=16, scale_bits=8, mx_flush_fp32_subnorms=True), fmt,
                                      axes=[1], round=rnd),
                       fake_quant(x, fmt, 16, dim=1, rounding=rnd))


def test_mx_op_alias_none_and_block_size_zero():
    x = torch.randn(3, 50)
    assert quantize_mx_op(x, MxSpecs(), None, axes=[-1]) is x
    assert torch.equal(quantize_mx_op(x, MxSpecs(), "fp4", axes=[-1]), fake_quant(x, "fp4_e2m1", None))
    assert torch.equal(quantize_mx_op(x, MxSpecs(shared_exp_method="none"), "int8", axes=[-1]),
                       fake_quant(x, "int8", 1, rounding="nearest"))


def test_scale_bits_clamps_the_shared_exponent():
    x = torch.full((1, 4), 2.0 ** -20)
    # scale_bits=4: exponent in [-7, 7]; -20 - 8 is clamped to -7 -> elements underflow to 0 in fp8_e4m3
    assert quantize_mx_op(x, MxSpecs(scale_bits=4), "fp8_e4m3", axes=[-1]).abs().max().item() == 0.0
    assert quantize_mx_op(x, MxSpecs(), "fp8_e4m3", axes=[-1]).equal(x)


def test_errors_name_the_setting():
    with pytest.raises(ValueError, match="elem_format='fp7'"):
        quantize_mx_op(torch.ones(4), MxSpecs(), "fp7", axes=[-1])
    with pytest.raises(ValueError, match="not provided"):
        quantize_mx_op(torch.ones(4), MxSpecs(), "bfloat16", axes=[-1])
    with pytest.raises(ValueError, match="round_mx"):
        quantize_mx_op(torch.ones(4), MxSpecs(), "int8", axes=[-1], round="up")
    with pytest.raises(ValueError, match="round='dither'"):
        quantize_elemwise_op(torch.ones(4), MxSpecs(bfloat=16), round="dither")


def test_elementwise_bfloat16_even_is_the_bfloat16_cast():
    torch.manual_seed(1)
    x = torch.randn(1000) * 100
    assert torch.equal(quantize_elemwise_op(x, MxSpecs(bfloat=16), "even"), x.to(torch.bfloat16).float())
    assert quantize_elemwise_op(x, MxSpecs(), "even") is x
    assert quantize_elemwise_op(x, None) is x


def test_elementwise_nearest_ties_away_floor_truncates():
    tie = torch.tensor([1.0 + 2.0 ** -8, -(1.0 + 3 * 2.0 ** -8), 1.0 + 2.0 ** -7 + 2.0 ** -9])
    s = MxSpecs(bfloat=16)
    assert quantize_elemwise_op(tie, s, "nearest").tolist() == [1.0 + 2.0 ** -7, -(1.0 + 2.0 ** -6), 1.0 + 2.0 ** -7]
    assert quantize_elemwise_op(tie, s, "even").tolist() == [1.0, -(1.0 + 2.0 ** -6), 1.0 + 2.0 ** -7]
    assert quantize_elemwise_op(tie, s, "floor").tolist() == [1.0, -(1.0 + 2.0 ** -7), 1.0 + 2.0 ** -7]


def test_quantize_bfloat_rounds_gradient_too():
    x = torch.tensor([1.0 + 2.0 ** -9], requires_grad=True)
    y = quantize_bfloat(x, MxSpecs(bfloat=16, round="even"))
    y.backward(torch.tensor([1.0 + 2.0 ** -9]))
    assert y.item() == 1.0 and x.grad.item() == 1.0
