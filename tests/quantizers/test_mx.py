"""MX defaults give exactly groupquant.fake_quant on the same data (OCP MX v1.0)."""
import pytest
import torch

import groupquant as gq
from groupquant.core import build_tensor_quant
from groupquant.quantizers import MX_QUANTIZERS, MXInt8Weight, quantizer_spec

PAIRS = [(pair.weight, pair.act, name) for name, pair in MX_QUANTIZERS.items()]


@pytest.mark.parametrize("weight_q, act_q, name", PAIRS)
def test_weight_quantizer_is_fake_quant_along_input_dim(weight_q, act_q, name):
    w = torch.randn(8, 20, 3, 3)  # conv weight: groups along dim 1 (input channels), padded
    out = build_tensor_quant(quantizer_spec(weight_q).with_dims(1, 0))(w)  # the dims a weight layer gives
    assert weight_q.group_dim is None and weight_q.element_format == gq.get_format(name)
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(w, name, 32, 1))


@pytest.mark.parametrize("weight_q, act_q, name", PAIRS)
def test_act_quantizer_is_fake_quant_along_last_dim(weight_q, act_q, name):
    x = torch.randn(2, 5, 64) * 100
    x[0, 0, 3] = float("nan")
    out = act_q.tensor_quant(x)
    expected = gq.fake_quant(x, name, 32, -1)
    assert torch.equal(out.layout.expand(out.value).nan_to_num(7.0), expected.nan_to_num(7.0))
    assert torch.isnan(out.value[0, 0, 0]).all()  # the NaN group is all NaN (X = NaN)


def test_mxint8_is_1_6_fixed_point():
    """Hand-built block: amax 1.9 -> E8M0 scale 2**(0 - emax 0) = 1; elements on the 1/64 grid."""
    x = torch.zeros(1, 32)
    x[0, :4] = torch.tensor([1.9, 0.01, -1.0, 1.5 / 64])
    out = MXInt8Weight.tensor_quant(x)
    assert out.scale.flatten().tolist() == [1.0]
    # 1.9 * 64 = 121.6 -> 122; 0.01 * 64 = 0.64 -> 1; 1.5 is a tie -> even 2
    assert out.value[0, 0, :4].tolist() == [122 / 64, 1 / 64, -1.0, 2 / 64]
    assert MXInt8Weight.max_normal == 127 / 64 and MXInt8Weight.emax == 0


def test_mxint8_saturates_at_127_over_64():
    x = torch.zeros(1, 32)
    x[0, :2] = torch.tensor([1.999, -1.999])  # floor(log2) = 0 -> scale 1, 1.999 * 64 = 127.9 -> 127
    out = MXInt8Weight.tensor_quant(x)
    assert out.value[0, 0, :2].tolist() == [127 / 64, -127 / 64]
