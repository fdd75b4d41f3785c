import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import QuantConv1d, QuantConv2d
from groupquant.quantizers import (Int8WeightPerChannel, MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXInt8Act,
                                   MXInt8Weight)


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


def _spanning(*shape):
    """Normal data whose channels (dim 0 of ``shape``) span the binades 2**-6 .. 2**6."""
    scale = 2.0 ** torch.randint(-6, 7, (shape[0],) + (1,) * (len(shape) - 1)).float()
    return torch.randn(*shape) * scale


@pytest.mark.parametrize("cls, conv, spatial", [(QuantConv1d, F.conv1d, (13,)), (QuantConv2d, F.conv2d, (7, 6))])
@pytest.mark.parametrize("weight_q, act_q, wname, aname", [
    (MXFloat4e2m1Weight, MXFloat8e4m3Act, "fp4_e2m1", "fp8_e4m3"), (MXInt8Weight, MXInt8Act, "int8", "int8")])
def test_unbatched_input_groups_along_the_channels(cls, conv, spatial, weight_q, act_q, wname, aname):
    torch.manual_seed(3)
    layer = cls(40, 36, 3, padding=1, weight_quant=weight_q, input_quant=act_q, output_quant=act_q)
    with torch.no_grad():
        layer.weight.mul_(_spanning(36, 1, *(1,) * len(spatial)))
    x = _spanning(40, *spatial)
    x[:32] = 0.0  # a zero group of channels at every position; the second group (8 channels + padding) is not
    y = layer(x)
    assert y.shape == (36, *spatial)
    assert torch.equal(y, layer(x[None])[0])
    pre = conv(gq.fake_quant(x, aname, 32, dim=0), gq.fake_quant(layer.weight, wname, 32, dim=1), layer.bias,
               padding=1)
    assert torch.equal(y, gq.fake_quant(pre, aname, 32, dim=0))


def test_unbatched_input_with_return_quant_tensor_asks_for_the_batch_dim():
    layer = QuantConv1d(4, 4, 1, output_quant=MXFloat8e4m3Act, return_quant_tensor=True)
    with pytest.raises(ValueError, match=r"needs batched input with 3 dims; got unbatched input of shape \(4, 5\)"):
        layer(torch.randn(4, 5))
    assert layer(torch.randn(2, 4, 5)).value.shape == (2, 4, 5)


@pytest.mark.parametrize("backward", [{}, {"grad_output_quant": MXFloat8e4m3Act}], ids=["lean", "quantized"])
def test_meta_device_with_grad_enabled_runs_forward_and_backward(backward):
    layer = QuantConv2d(32, 8, 3, device="meta", weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        **backward)
    x = torch.randn(2, 32, 6, 6, device="meta", requires_grad=True)
    y = layer(x)
    assert y.shape == torch.nn.Conv2d(32, 8, 3, device="meta")(x).shape
    y.sum().backward()
    assert layer.weight.grad.shape == layer.weight.shape and x.grad.shape == x.shape
