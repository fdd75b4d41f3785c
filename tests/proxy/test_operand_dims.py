"""Each operand is grouped along the dim its layer reduces over, whatever role the quantizer was
written for; a dim the tensor lacks is an error naming the layer keyword; eval caches the weight."""
import pytest
import torch

import groupquant as gq
from groupquant.inject import ConfigError
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight, MXInt8Weight


def _binades(*shape):
    g = torch.Generator().manual_seed(3)
    return torch.randn(*shape, generator=g) * torch.logspace(-4, 4, shape[-1])


def test_a_weight_quantizer_used_as_input_quant_groups_along_the_features():
    x = _binades(2, 40, 96).transpose(1, 2).contiguous().transpose(1, 2)  # (B, T, C): T=40, C=96
    x = _binades(2, 40, 96)
    as_weight_q = QuantLinear(96, 8, input_quant=MXFloat8e4m3Weight, bias=False)
    as_act_q = QuantLinear(96, 8, input_quant=MXFloat8e4m3Act, bias=False)
    as_act_q.weight = as_weight_q.weight
    expected = torch.nn.functional.linear(gq.fake_quant(x, "fp8_e4m3", 32, -1), as_weight_q.weight)
    assert torch.equal(as_weight_q(x), expected) and torch.equal(as_act_q(x), expected)


def test_an_explicit_group_dim_is_honoured_and_checked():
    x = _binades(4, 40)
    layer = QuantLinear(40, 8, input_quant=MXFloat8e4m3Act, input_group_dim=0)
    expected = torch.nn.functional.linear(gq.fake_quant(x, "fp8_e4m3", 32, 0), layer.weight, layer.bias)
    assert torch.equal(layer(x), expected)
    bad = QuantLinear(40, 8, input_quant=MXFloat8e4m3Act, input_group_dim=3)
    with pytest.raises(ConfigError) as info:
        bad(x)
    assert info.value.setting == "input_group_dim" and "QuantLinear" in str(info.value)
    assert "out of range" in str(info.value)


def test_eval_caches_the_quantized_weight_until_it_changes():
    layer = QuantLinear(64, 16, weight_quant=MXInt8Weight).eval()
    x = torch.randn(3, 64)
    calls = []
    layer.weight_quant.tensor_quant.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        y1, y2 = layer(x), layer(x)
        assert torch.equal(y1, y2) and len(calls) == 1
        layer.weight.mul_(2.0)  # in-place change: version bump
        y3 = layer(x)
        assert len(calls) == 2
        assert torch.equal(y3, torch.nn.functional.linear(x, gq.fake_quant(layer.weight, "int8", 32, 1), layer.bias))
        layer.weight = torch.nn.Parameter(torch.randn(16, 64))  # a new tensor
        layer(x)
        assert len(calls) == 3
        state = {k: v.clone() for k, v in layer.state_dict().items()}
        state["weight"] = torch.randn(16, 64)
        layer.load_state_dict(state)
        assert torch.equal(layer(x), torch.nn.functional.linear(x, gq.fake_quant(state["weight"], "int8", 32, 1),
                                                              layer.bias))
    layer.train()
    layer(x)
    layer(x)
    assert len(calls) == 6  # training: no cache
    layer.eval()
    y = layer(x)  # eval with grad enabled and a weight that wants one: no cache, a gradient flows
    y.sum().backward()
    assert layer.weight.grad is not None and len(calls) == 7


def test_conv_activation_groups_along_channels_with_any_quantizer_role():
    x = _binades(2, 40, 5, 6).transpose(1, 3).contiguous().transpose(1, 3)
    layer = QuantConv2d(40, 8, 3, input_quant=MXFloat8e4m3Weight, bias=False)
    expected = layer._conv_forward(gq.fake_quant(x, "fp8_e4m3", 32, 1), layer.weight, None)
    assert torch.equal(layer(x), expected)

