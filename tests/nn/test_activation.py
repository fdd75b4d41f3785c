import pytest
import torch

import groupquant as gq
from groupquant.nn import QuantIdentity, QuantReLU
from groupquant.quant_tensor import GroupwiseFloatQuantTensor
from groupquant.quantizers import MXFloat8e4m3Act, Uint8ActPerTensor


def test_identity_quantizes_along_the_feature_dim():
    x = torch.randn(2, 64, 3)
    assert torch.equal(QuantIdentity(output_quant=MXFloat8e4m3Act)(x), gq.fake_quant(x, "fp8_e4m3", 32, -1))
    nchw = QuantIdentity(input_quant=MXFloat8e4m3Act, feature_dim=1)
    assert torch.equal(nchw(x), gq.fake_quant(x, "fp8_e4m3", 32, 1))
    assert QuantIdentity()(x) is x


def test_relu_with_unsigned_output_and_quant_tensor():
    relu = QuantReLU(output_quant=Uint8ActPerTensor, return_quant_tensor=True)
    x = torch.randn(100)
    out = relu(x)
    assert out.int().dtype == torch.uint8
    s = x.relu().max() / 255
    assert torch.allclose(out.value, torch.round(x.relu() / s) * s)
    fp8 = QuantReLU(input_quant=MXFloat8e4m3Act, return_quant_tensor=True)(x)
    assert not isinstance(fp8, GroupwiseFloatQuantTensor)  # no output quantizer: a plain tensor
    assert torch.equal(fp8, gq.fake_quant(x, "fp8_e4m3").relu())


def test_other_libraries_argument_name_gets_a_pointer():
    with pytest.raises(ValueError, match="unknown keyword 'act_quant'; did you mean 'output_quant'"):
        QuantReLU(act_quant=Uint8ActPerTensor)
