import pytest
import torch
from torch import nn

import groupquant as gq
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Act


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Sequential(nn.Linear(8 * 4 * 4, 32), nn.ReLU()),
                         nn.Linear(32, 10))


def test_replaces_layers_and_keeps_the_parameters():
    model = _model()
    params = [model[0].weight, model[2][0].weight, model[3].bias]
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        conv_in = gq.fake_quant(x, "fp8_e4m3", 32, 1)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act, exclude="3")
    assert isinstance(model[0], QuantConv2d) and isinstance(model[2][0], QuantLinear)
    assert type(model[3]) is nn.Linear
    assert model[0].weight is params[0] and model[2][0].weight is params[1] and model[3].bias is params[2]
    first = torch.nn.functional.conv2d(conv_in, gq.fake_quant(params[0], "fp4_e2m1", 32, 1), model[0].bias)
    assert torch.equal(model[0](x), first)


def test_include_and_keywords():
    model = gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, include=["2.*"], weight_group_size=16)
    assert isinstance(model[2][0], QuantLinear) and model[2][0].weight_quant.quantizer.group_size == 16
    assert type(model[0]) is nn.Conv2d and type(model[3]) is nn.Linear


def test_pattern_typo_and_keyword_typo_fail():
    with pytest.raises(ValueError, match="include pattern 'encoder' matches no"):
        gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, include="encoder")
    with pytest.raises(ValueError, match="did you mean 'weight_group_size'"):
        gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, weight_groupsize=16)


def test_a_bare_layer_is_returned_converted():
    layer = nn.Linear(4, 2)
    new = gq.quantize_model(layer, weight_quant=MXFloat4e2m1Weight)
    assert isinstance(new, QuantLinear) and new.weight is layer.weight


def test_attention_out_proj_is_left_alone():
    mha = nn.MultiheadAttention(8, 2)
    gq.quantize_model(mha, weight_quant=MXFloat4e2m1Weight)
    assert not isinstance(mha.out_proj, QuantLinear)
