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


def _spanning(*shape):
    """Normal data over the binades 2**-8 .. 2**8 along the last dim, with a zero group of 32."""
    x = torch.randn(*shape) * 2.0 ** torch.randint(-8, 9, shape[-1:]).float()
    x[..., :32] = 0.0
    return x


def test_act_quant_is_the_quantizer_after_the_activation():
    torch.manual_seed(0)
    x = _spanning(3, 70)  # 70 = 2 groups of 32 + 6 padded
    relu = QuantReLU(act_quant=MXFloat8e4m3Act)
    assert torch.equal(relu(x), gq.fake_quant(x.relu(), "fp8_e4m3", 32, -1))
    assert relu.output_quant.quantizer is not None and relu.input_quant.quantizer is None
    ident = QuantIdentity(act_quant=MXFloat8e4m3Act, feature_dim=0)
    assert torch.equal(ident(x), gq.fake_quant(x, "fp8_e4m3", 32, 0))
    both = QuantReLU(act_quant=MXFloat8e4m3Act, input_quant=MXFloat8e4m3Act, input_group_size=16)
    assert torch.equal(both(x), gq.fake_quant(gq.fake_quant(x, "fp8_e4m3", 16, -1).relu(), "fp8_e4m3", 32, -1))


def test_unprefixed_and_act_prefixed_keywords_set_the_act_quantizer():
    torch.manual_seed(1)
    x = _spanning(4, 70)
    fp6 = dict(bit_width=6, exponent_bit_width=2, mantissa_bit_width=3)
    expected = gq.fake_quant(x, "fp6_e2m3", 16, -1)
    as_brevitas = QuantIdentity(act_quant=MXFloat8e4m3Act, group_size=16, **fp6)
    assert torch.equal(as_brevitas(x), expected)
    prefixed = {"act_" + k: v for k, v in fp6.items()}
    assert torch.equal(QuantIdentity(act_quant=MXFloat8e4m3Act, act_group_size=16, **prefixed)(x), expected)
    assert torch.equal(QuantIdentity(output_quant=MXFloat8e4m3Act, output_group_size=16, **fp6)(x), expected)
    relu4 = QuantReLU(act_quant=Uint8ActPerTensor, bit_width=4)
    s = x.relu().max() / 15  # unsigned 4-bit per tensor: 0..15
    assert torch.allclose(relu4(x), torch.round(x.relu() / s) * s, rtol=0, atol=1e-6 * float(s))
    assert len(torch.unique(relu4(x))) <= 16


def test_act_quant_keyword_errors_name_the_keyword():
    with pytest.raises(ValueError, match="unknown keyword 'bit_widht'; did you mean 'bit_width'"):
        QuantReLU(act_quant=Uint8ActPerTensor, bit_widht=4)
    with pytest.raises(ValueError, match="unknown keyword 'act_group_sise'; did you mean 'act_group_size'"):
        QuantIdentity(act_quant=MXFloat8e4m3Act, act_group_sise=16)
    with pytest.raises(ValueError, match="unknown setting 'input_group_sise'.*did you mean 'input_group_size'"):
        QuantReLU(act_quant=MXFloat8e4m3Act, input_quant=MXFloat8e4m3Act, input_group_sise=16)
    with pytest.raises(ValueError, match="unknown keyword 'return_quant_tensors'; did you mean 'return_quant_tensor'"):
        QuantReLU(act_quant=Uint8ActPerTensor, return_quant_tensors=True)
    with pytest.raises(ValueError, match="unknown keyword 'zzz'; settings of Uint8ActPerTensor: bit_width"):
        QuantReLU(act_quant=Uint8ActPerTensor, zzz=1)
    with pytest.raises(ValueError, match="keyword 'bit_width', which sets the act quantizer, but no act_quant"):
        QuantReLU(bit_width=4)
    with pytest.raises(ValueError, match="got 'bit_width' and 'output_bit_width', which set the same"):
        QuantReLU(act_quant=Uint8ActPerTensor, bit_width=4, output_bit_width=8)


@pytest.mark.parametrize("cls", [QuantIdentity, QuantReLU])
@pytest.mark.parametrize("act", [Uint8ActPerTensor, None])
def test_act_quant_and_output_quant_together_are_refused(cls, act):
    with pytest.raises(ValueError, match="both act_quant=.* and output_quant=.*same slot"):
        cls(act_quant=act, output_quant=MXFloat8e4m3Act)
