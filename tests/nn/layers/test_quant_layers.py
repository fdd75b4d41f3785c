"""The quant-layer protocol: is_quant_layer / iter_quant_layers find the layers that hold and
quantize a weight; a layer's weight_spec, set_weight (copy, cache dropped) and quant_gemm (its
forward's route, with another weight when given) against torch's own layers on fake-quant operands."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.nn import (QuantConv2d, QuantIdentity, QuantLinear, QuantMatMul, is_quant_layer, iter_quant_layers,
                           quantize_model)
from groupquant.nn.functional.functional_quantizers import FunctionalLinear
from groupquant.nn.recipes import recipe


def _model():
    return nn.Sequential(QuantLinear(32, 16, weight_quant=Q.MXFloat4e2m1Weight), QuantIdentity(),
                         nn.Sequential(QuantLinear(16, 8), QuantConv2d(3, 4, 3, weight_quant=Q.MXFloat8e4m3Weight)),
                         QuantMatMul(), nn.Linear(8, 8))


def test_the_layers_with_a_weight_slot_are_found_in_module_order():
    model = _model()
    assert [name for name, _ in iter_quant_layers(model)] == ["0", "2.0", "2.1"]
    assert [name for name, _ in iter_quant_layers(model, kinds=QuantLinear)] == ["0", "2.0"]
    assert [name for name, _ in iter_quant_layers(model, kinds=(QuantConv2d,))] == ["2.1"]
    assert not is_quant_layer(model[1]) and not is_quant_layer(model[3]) and not is_quant_layer(model[4])
    with pytest.raises(TypeError, match="kinds"):
        list(iter_quant_layers(model, kinds="linear"))


def test_a_functional_layer_borrows_its_weight_and_is_not_a_quant_layer():
    assert not is_quant_layer(FunctionalLinear(8, 16, True, recipe("mxfp8")))


def test_weight_spec_is_the_weight_quantizers_resolved_spec():
    model = _model()
    assert model[0].weight_spec is model[0].weight_quant.spec and model[0].weight_spec.fmt == gq.get_format("fp4_e2m1")
    assert model[2][0].weight_spec is None  # a float weight


def test_set_weight_copies_and_drops_the_eval_cache():
    layer = QuantLinear(32, 8, weight_quant=Q.MXFloat4e2m1Weight, dtype=torch.bfloat16).eval()
    x = torch.randn(3, 32, dtype=torch.bfloat16)
    layer(x)
    assert layer.weight_quant._cache is not None
    w = torch.randn(8, 32, dtype=torch.float64)
    layer.set_weight(w)
    assert layer.weight_quant._cache is None
    assert torch.equal(layer.weight, w.to(torch.bfloat16))
    want = F.linear(x, gq.fake_quant(w.to(torch.bfloat16), "fp4_e2m1"), layer.bias)
    assert torch.equal(layer(x), want)
    with pytest.raises(ValueError, match=r"QuantLinear.set_weight: weight of shape \(8, 16\)"):
        layer.set_weight(torch.zeros(8, 16))


def test_quant_gemm_is_the_forward_and_takes_another_weight():
    torch.manual_seed(0)
    layer = QuantLinear(64, 8, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat8e4m3Act)
    x = torch.randn(5, 64)
    assert torch.equal(layer.quant_gemm(x), layer(x))
    w = torch.randn(8, 64)
    want = F.linear(gq.fake_quant(x, "fp8_e4m3"), gq.fake_quant(w, "fp4_e2m1", dim=1), layer.bias)
    assert torch.equal(layer.quant_gemm(x, w), want)


def test_quant_gemm_of_a_convolution_is_its_batched_forward():
    torch.manual_seed(1)
    conv = QuantConv2d(3, 4, 3, padding=1, weight_quant=Q.MXFloat8e4m3Weight)
    x = torch.randn(2, 3, 6, 6)
    want = F.conv2d(x, gq.fake_quant(conv.weight, "fp8_e4m3", dim=1), conv.bias, padding=1)
    assert torch.equal(conv.quant_gemm(x), want) and torch.equal(conv(x), want)


def test_a_converted_model_lists_its_layers():
    model = quantize_model(nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)), recipe="mxfp4")
    assert [name for name, _ in iter_quant_layers(model)] == ["0", "2"]


def test_a_prefix_gives_full_names_as_named_modules_writes_them():
    model = _model()
    inner = model[2]
    assert [name for name, _ in iter_quant_layers(inner, prefix="2")] == ["2.0", "2.1"]
    assert [name for name, _ in iter_quant_layers(model[0], prefix="blocks.0")] == ["blocks.0"]  # the module itself
    assert [name for name, _ in iter_quant_layers(inner, prefix="")] == ["0", "1"]
    with pytest.raises(TypeError, match="prefix"):
        list(iter_quant_layers(inner, prefix=2))


def test_quant_gemm_takes_another_bias_or_none():
    torch.manual_seed(2)
    layer = QuantLinear(64, 8, weight_quant=Q.MXFloat4e2m1Weight, input_quant=Q.MXFloat8e4m3Act)
    x, w, b = torch.randn(5, 64), torch.randn(8, 64), torch.randn(8)
    qx, qw = gq.fake_quant(x, "fp8_e4m3"), gq.fake_quant(w, "fp4_e2m1", dim=1)
    assert torch.equal(layer.quant_gemm(x, w, bias=None), F.linear(qx, qw))
    assert torch.equal(layer.quant_gemm(x, w, bias=b), F.linear(qx, qw, b))
    assert not torch.equal(layer.quant_gemm(x, w, bias=None), layer.quant_gemm(x, w))  # its own bias is not zero
