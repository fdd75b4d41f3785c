import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import QuantConv1d, QuantConv2d
from groupquant.quantizers import Int8WeightPerChannel, MXFloat4e2m1Weight, MXFloat8e4m3Act, MXInt8Act, MXInt8Weight


@pytest.mark.parametrize("weight_q, act_q, wname, aname", [
    (MXFloat4e2m1Weight, MXFloat8e4m3Act, "fp4_e2m1", "fp8_e4m3"), (MXInt8Weight, MXInt8Act, "int8", "int8")])
def test_conv2d_equals_conv_of_fake_quants_along_channels(weight_q, act_q, wname, aname):
    conv = QuantConv2d(40, 6, 3, padding=1, stride=2, weight_quant=weight_q, input_quant=act_q)
    x = torch.randn(2, 40, 9, 9)
    expected = F.conv2d(gq.fake_quant(x, aname, 32, 1), gq.fake_quant(conv.weight, wname, 32, 1), conv.bias,
                        stride=2, padding=1)
    assert torch.equal(conv(x), expected)


def test_conv1d_with_padding_mode_and_groups():
    conv = QuantConv1d(8, 4, 3, padding=1, groups=2, padding_mode="circular", weight_quant=MXFloat4e2m1Weight,
                       input_quant=MXFloat8e4m3Act)
    ref = nn.Conv1d(8, 4, 3, padding=1, groups=2, padding_mode="circular")
    with torch.no_grad():
        ref.weight.copy_(gq.fake_quant(conv.weight, "fp4_e2m1", 32, 1))
        ref.bias.copy_(conv.bias)
    x = torch.randn(2, 8, 11)
    assert torch.equal(conv(x), ref(gq.fake_quant(x, "fp8_e4m3", 32, 1)))


def test_per_channel_conv_weight_scale_shape():
    conv = QuantConv2d(3, 5, 3, weight_quant=Int8WeightPerChannel)
    assert conv.quant_weight().scale.shape == (5, 1, 1, 1)
