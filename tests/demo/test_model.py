import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.demo.model import (GEMM_SLOTS, MX_QUANTIZERS, build_mlp, gemm_operands, mx_quantizers,
                                   packed_model_bytes, quantized_copy, recipe_copy, weight_sqnr_db)
from groupquant.inject import UnknownSettingError


def test_build_mlp_shapes_seed_and_global_rng_untouched():
    before = torch.random.get_rng_state()
    a, b = build_mlp(64, (32, 16), 10, seed=5), build_mlp(64, (32, 16), 10, seed=5)
    assert torch.equal(torch.random.get_rng_state(), before)
    shapes = [tuple(m.weight.shape) for m in a if isinstance(m, nn.Linear)]
    assert shapes == [(32, 64), (16, 32), (10, 16)]
    assert sum(isinstance(m, nn.ReLU) for m in a) == 2
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    with pytest.raises(ValueError, match="widths"):
        build_mlp(64, (0,), 10)


def test_quantized_copy_swaps_linears_and_leaves_the_original():
    model = build_mlp(64, (32,), 10, seed=0)
    q = quantized_copy(model, "mxfp4")
    assert [type(m).__name__ for m in q] == ["QuantLinear", "ReLU", "QuantLinear"]
    assert isinstance(model[0], nn.Linear) and type(model[0]) is nn.Linear
    q[0].weight.data.zero_()
    assert model[0].weight.abs().sum() > 0
    with pytest.raises(ValueError, match="unknown format"):
        quantized_copy(model, "fp5")
    with pytest.raises(ValueError, match="not an MX element format"):
        quantized_copy(model, "int4")


def test_every_mx_format_has_its_quantizer_pair():
    assert sorted(MX_QUANTIZERS) == sorted(gq.MX_FORMATS)
    assert mx_quantizers("mxfp8").weight.__name__ == "MXFloat8e4m3Weight"
    assert mx_quantizers("mxint8").act.__name__ == "MXInt8Act"


@pytest.mark.parametrize("fmt", ["fp4_e2m1", "int8", "fp6_e3m2"])
def test_quantized_layer_is_fake_quant_of_weight_and_input_along_input_features(fmt):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 8))
    # one huge weight per row in the first block: grouping along inputs flushes that block's small
    # weights, grouping along outputs would flush a whole column instead
    with torch.no_grad():
        model[0].weight[:, 0] = 100.0
    w = model[0].weight.detach()
    w_ref = gq.fake_quant(w, fmt, 32, dim=1)
    assert not torch.equal(w_ref, gq.fake_quant(w, fmt, 32, dim=0))
    x = torch.randn(5, 64)
    expected = F.linear(gq.fake_quant(x, fmt, 32, dim=1), w_ref, model[0].bias)
    with torch.no_grad():
        assert torch.equal(quantized_copy(model, fmt)(x), expected)


def test_qat_gradient_reaches_the_float_weights():
    q = quantized_copy(nn.Sequential(nn.Linear(32, 4)), "fp8_e4m3")
    q(torch.randn(3, 32)).sum().backward()
    assert q[0].weight.grad is not None and q[0].weight.grad.abs().sum() > 0


def test_weight_sqnr_by_hand():
    model = nn.Sequential(nn.Linear(32, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0] * 31 + [0.75], [2.0] * 32]))
    # fp4 block with amax 1 -> scale 2**(0 - 2) = 1/4, elements 1 -> 4 (exact), 0.75 -> 3 (exact): all exact
    assert math.isinf(weight_sqnr_db(model, quantized_copy(model, "fp4_e2m1")))
    with torch.no_grad():
        model[0].weight[0, 31] = 0.8  # 0.8 / 0.25 = 3.2 -> 3: error 0.05
    signal = 31 * 1.0 + 0.8 ** 2 + 32 * 4.0
    expected = 10 * math.log10(signal / 0.05 ** 2)
    assert weight_sqnr_db(model, quantized_copy(model, "fp4_e2m1")) == pytest.approx(expected, rel=1e-6)


def test_packed_bytes_by_hand():
    model = nn.Sequential(nn.Linear(64, 10), nn.ReLU(), nn.Linear(10, 3, bias=False))
    # layer 1: 640 fp4 elements = 320 bytes, 10 rows x 2 blocks = 20 scale bytes, 10 float32 biases = 40
    # layer 2: 3 rows of 10; a block of 32 covers the whole dim, so one block of 10 per row (no
    # padding stored): 30 elements = 15 bytes, 3 scale bytes
    assert packed_model_bytes(quantized_copy(model, "fp4_e2m1")) == 320 + 20 + 40 + 15 + 3
    # 6 bits: 640 * 6 / 8 = 480; 30 * 6 / 8 = 22.5 -> 23 (the bit stream ends in a whole byte)
    assert packed_model_bytes(quantized_copy(model, "fp6_e3m2")) == 480 + 20 + 40 + 23 + 3


def test_recipe_copy_quantizes_every_gemm_operand_and_leaves_the_original():
    model = build_mlp(64, (32,), 10, seed=0)
    q = recipe_copy(model, "mxfp8")
    assert [type(m).__name__ for m in q] == ["QuantLinear", "ReLU", "QuantLinear"]
    assert type(model[0]) is nn.Linear and q[0].weight is not model[0].weight
    assert torch.equal(q[0].weight, model[0].weight)  # the same starting weights
    for layer in (q[0], q[2]):
        assert layer.quantize_backprop
        assert all(getattr(layer, slot) is not None for slot in GEMM_SLOTS[2:])  # the backward proxies
        assert gemm_operands(layer) == {
            "input_quant": "MXFloat8e4m3Act", "weight_quant": "MXFloat8e4m3Weight",
            "grad_output_quant": "MXFloat8e4m3Act", "weight_quant_for_grad_input": "MXFloat8e4m3Weight",
            "grad_output_quant_for_grad_weight": "MXFloat8e4m3Act", "input_quant_for_grad_weight": "MXFloat8e4m3Act"}


def test_gemm_operands_of_mixed_and_weight_only_recipes():
    model = build_mlp(64, (32,), 10, seed=0)
    mixed = gemm_operands(recipe_copy(model, "mxfp4_fwd_mxfp8_bwd")[0])
    assert mixed["input_quant"] == "MXFloat4e2m1Act" and mixed["weight_quant"] == "MXFloat4e2m1Weight"
    assert mixed["weight_quant_for_grad_input"] == "MXFloat8e4m3Weight"
    assert mixed["grad_output_quant"] == mixed["grad_output_quant_for_grad_weight"] == "MXFloat8e4m3Act"
    assert mixed["input_quant_for_grad_weight"] == "MXFloat8e4m3Act"
    e5m2 = gemm_operands(recipe_copy(model, "mxfp8_e4m3_e5m2")[0])
    assert e5m2["input_quant"] == "MXFloat8e4m3Act" and e5m2["grad_output_quant"] == "MXFloat8e5m2Act"
    weight_only = recipe_copy(model, "mxfp4_weight_only")[0]
    assert not weight_only.quantize_backprop
    assert gemm_operands(weight_only) == {slot: ("MXFloat4e2m1Weight" if slot == "weight_quant" else None)
                                          for slot in GEMM_SLOTS}


def test_recipe_copy_rejects_an_unknown_recipe_with_a_suggestion():
    with pytest.raises(UnknownSettingError, match="did you mean 'mxfp8'"):
        recipe_copy(build_mlp(64, (32,), 10), "mxfp_8")


@pytest.mark.parametrize("name, fwd, bwd", [("mxfp8", "fp8_e4m3", "fp8_e4m3"),
                                            ("mxfp4_fwd_mxfp8_bwd", "fp4_e2m1", "fp8_e4m3")])
def test_recipe_gradients_are_gemms_of_quantized_operands(name, fwd, bwd):
    """dX = Q(dY | out) Q(W | out), dW = Q(dY | tokens)^T Q(x | tokens), rebuilt with gq.fake_quant."""
    gen = torch.Generator().manual_seed(1)
    layer = recipe_copy(nn.Sequential(nn.Linear(64, 32)), name)[0]
    x = torch.randn(48, 64, generator=gen).requires_grad_(True)
    dy = torch.randn(48, 32, generator=gen)
    y = layer(x)
    w = layer.weight.detach()
    expected_y = F.linear(gq.fake_quant(x.detach(), fwd, 32, dim=1), gq.fake_quant(w, fwd, 32, dim=1), layer.bias)
    assert torch.allclose(y, expected_y, rtol=1e-5, atol=1e-5)
    y.backward(dy)
    expected_dx = gq.fake_quant(dy, bwd, 32, dim=1) @ gq.fake_quant(w, bwd, 32, dim=0)
    expected_dw = gq.fake_quant(dy, bwd, 32, dim=0).T @ gq.fake_quant(x.detach(), bwd, 32, dim=0)
    assert torch.allclose(x.grad, expected_dx, rtol=1e-5, atol=1e-5)
    assert torch.allclose(layer.weight.grad, expected_dw, rtol=1e-5, atol=1e-5)
    # not the straight-through gradient of the forward quantizers (today's QAT)
    assert not torch.allclose(layer.weight.grad, dy.T @ gq.fake_quant(x.detach(), fwd, 32, dim=1), rtol=1e-3)
    assert torch.equal(layer.bias.grad, dy.sum(0))
