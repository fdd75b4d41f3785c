import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.inject import ConfigError, UnknownSettingError
from groupquant.nn import QuantLinear
from groupquant.quant_tensor import GroupwiseFloatQuantTensor, GroupwiseIntQuantTensor, QuantTensor
from groupquant.quantizers import (MX_QUANTIZERS, Fp8e4m3ActPerTensor, Int8ActPerTensor, Int16BiasPerTensor,
                                   LearnedScaling, MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight,
                                   MXInt8Weight)

PAIRS = [(pair.weight, pair.act, name) for name, pair in MX_QUANTIZERS.items()]


class LearnedMXFP4(LearnedScaling, MXFloat4e2m1Weight):
    pass


@pytest.mark.parametrize("weight_q, act_q, name", PAIRS)
def test_output_equals_linear_of_fake_quants(weight_q, act_q, name):
    layer = QuantLinear(80, 24, weight_quant=weight_q, input_quant=act_q)
    x = torch.randn(3, 5, 80) * 4
    expected = F.linear(gq.fake_quant(x, name), gq.fake_quant(layer.weight, name), layer.bias)
    assert torch.equal(layer(x), expected)


@pytest.mark.parametrize("weight_q, act_q, name", PAIRS)
def test_quant_weight_gives_codes_of_quantize(weight_q, act_q, name):
    layer = QuantLinear(80, 24, weight_quant=weight_q)
    with torch.no_grad():
        q = layer.quant_weight()
    assert isinstance(q, GroupwiseIntQuantTensor if name == "int8" else GroupwiseFloatQuantTensor)
    assert q.value_.shape == (24, 3, 32) and q.scale_.shape == (24, 3, 1)
    g, ref = q.to_group_quantized(), gq.quantize(layer.weight.detach(), name)
    assert torch.equal(g.codes, ref.codes) and torch.equal(g.scale_codes, ref.scale_codes)


def test_none_means_float():
    layer = QuantLinear(10, 4)
    ref = nn.Linear(10, 4)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 10)
    assert torch.equal(layer(x), ref(x)) and layer.quant_weight() is layer.weight


def test_prefixed_keywords_reach_each_quantizer():
    layer = QuantLinear(64, 8, weight_quant=MXInt8Weight, input_quant=MXFloat8e4m3Act, weight_bit_width=4,
                        input_group_size=16)
    x = torch.randn(2, 64)
    expected = F.linear(gq.fake_quant(x, "fp8_e4m3", 16), gq.fake_quant(layer.weight, "int4"), layer.bias)
    assert torch.equal(layer(x), expected)


def test_typo_keywords_fail_with_the_closest_setting():
    with pytest.raises(UnknownSettingError) as info:
        QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight, weight_bitwidth=4)
    assert str(info.value) == ("QuantLinear got unknown setting 'weight_bitwidth' for MXFloat4e2m1Weight; "
                               "did you mean 'weight_bit_width'?")
    with pytest.raises(ValueError, match="unknown keyword 'bit_width'; did you mean 'weight_bit_width'"):
        QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight, bit_width=4)
    with pytest.raises(ValueError, match="'input_group_size' but no quantizer is set"):
        QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight, input_group_size=4)


def test_misconfiguration_fails_at_construction():
    with pytest.raises(ConfigError) as info:
        QuantLinear(64, 8, weight_quant=MXFloat8e4m3Weight, weight_bit_width=6)
    assert info.value.setting == "weight_bit_width"
    with pytest.raises(ValueError, match="bias=False"):
        QuantLinear(64, 8, bias=False, bias_quant=Int16BiasPerTensor)


def test_deprecated_flag_through_a_layer_keyword():
    with pytest.warns(DeprecationWarning):
        layer = QuantLinear(16, 4, weight_quant=gq.quantizers.Int8WeightPerTensor,
                            weight_scaling_per_output_channel=True)
    assert layer.quant_weight().scale.shape == (4, 1)


def test_return_quant_tensor_and_quant_tensor_input():
    layer = QuantLinear(32, 8, input_quant=MXFloat8e4m3Act, output_quant=MXFloat8e4m3Act, return_quant_tensor=True)
    out = layer(torch.randn(2, 32))
    assert isinstance(out, GroupwiseFloatQuantTensor) and out.shape == (2, 8)
    nxt = QuantLinear(8, 4)
    assert torch.equal(nxt(out), nxt(out.value))
    assert not isinstance(QuantLinear(32, 8, output_quant=MXFloat8e4m3Act)(torch.randn(2, 32)), QuantTensor)


def _model():
    return nn.Sequential(
        QuantLinear(64, 32, weight_quant=LearnedMXFP4, input_quant=Int8ActPerTensor, bias_quant=Int16BiasPerTensor),
        nn.ReLU(),
        QuantLinear(32, 10, weight_quant=MXFloat4e2m1Weight, input_quant=Fp8e4m3ActPerTensor))


def test_state_dict_round_trip_gives_identical_output():
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(16, 64)).square().mean().backward()
        opt.step()
    model.eval()
    state = model.state_dict()
    assert {"0.weight_quant.tensor_quant.scale_impl.learned_scale", "0.weight_quant.tensor_quant.scale_impl.initialized",
            "0.input_quant.tensor_quant.scale_impl.running_stat",
            "2.input_quant.tensor_quant.scale_impl.running_stat"} <= set(state)
    fresh = _model()
    fresh.load_state_dict(state)
    fresh.eval()
    x = torch.randn(5, 64)
    assert torch.equal(fresh(x), model(x))


def test_gradients_reach_weight_bias_and_learned_scale():
    layer = QuantLinear(64, 8, weight_quant=LearnedMXFP4, input_quant=MXFloat8e4m3Act)
    layer(torch.randn(4, 64)).square().sum().backward()
    scale = layer.weight_quant.tensor_quant.scale_impl.learned_scale
    for p in (layer.weight, layer.bias, scale):
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


def test_compile_fullgraph_on_a_fresh_layer_equals_eager():
    """A layer built just now (no eager call before) compiles with fullgraph=True."""
    torch.manual_seed(0)
    layer = QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)
    x = torch.randn(4, 64)
    compiled = torch.compile(layer, fullgraph=True, backend="eager")
    y = compiled(x)
    expected = F.linear(gq.fake_quant(x, "fp8_e4m3"), gq.fake_quant(layer.weight.detach(), "fp8_e4m3"), layer.bias)
    assert torch.equal(y.detach(), expected)


@pytest.mark.parametrize("kwargs", [dict(weight_quant=MXFloat8e4m3Weight),
                                    dict(weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)])
def test_meta_device_with_grad_enabled_runs_forward_and_backward(kwargs):
    layer = QuantLinear(64, 32, device="meta", **kwargs)
    x = torch.randn(5, 64, device="meta", requires_grad=True)
    y = layer(x)
    assert y.device.type == "meta" and y.shape == (5, 32)
    y.sum().backward()
    assert layer.weight.grad.shape == (32, 64) and x.grad.shape == (5, 64)
    reference = nn.Linear(64, 32, device="meta")(x)
    assert reference.shape == y.shape and reference.dtype == y.dtype


def test_compile_fullgraph_in_eval_after_an_eager_call_fills_the_weight_cache():
    layer = QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act).eval()
    x = torch.randn(4, 64)
    with torch.no_grad():
        eager = layer(x)  # the eval cache now holds the quantized weight
        compiled = torch.compile(layer, fullgraph=True, backend="eager")(x)
    assert torch.equal(compiled, eager)


def test_parametrized_weight_is_read_through_the_parametrization():
    layer = QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight)

    class Double(nn.Module):
        def forward(self, w):
            return 2 * w

    torch.nn.utils.parametrize.register_parametrization(layer, "weight", Double())
    x = torch.randn(4, 64)
    expected = F.linear(x, gq.fake_quant(layer.weight.detach(), "fp8_e4m3"), layer.bias)
    assert torch.equal(layer(x).detach(), expected)
