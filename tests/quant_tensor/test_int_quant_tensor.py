import torch

from groupquant.formats import IntFormat
from groupquant.quant_tensor import IntQuantTensor, quant_tensor_from_output
from groupquant.quantizers import Int8WeightPerChannel, Int8WeightPerTensor, Uint8ActPerTensor


def test_int_codes_and_scale_of_per_channel_int8():
    w = torch.randn(5, 30)
    q = quant_tensor_from_output(Int8WeightPerChannel.tensor_quant(w), Int8WeightPerChannel.element_format)
    s = w.abs().amax(dim=1, keepdim=True) / 127
    assert isinstance(q, IntQuantTensor) and q.scale.shape == (5, 1)
    assert torch.equal(q.scale, s)  # value = int * scale, the usual integer convention
    expected = torch.round(w / s).clamp(-127, 127)
    assert q.int().dtype == torch.int8 and torch.equal(q.int().float(), expected)
    assert torch.equal((q.int().float() - q.zero_point) * q.scale, q.value)
    assert q.fmt == IntFormat(8) and (q.bit_width, q.signed, q.narrow_range) == (8, True, True)


def test_uint8_codes():
    x = torch.rand(50)
    q = quant_tensor_from_output(Uint8ActPerTensor.tensor_quant(x), Uint8ActPerTensor.element_format)
    assert q.int().dtype == torch.uint8 and q.int().max().item() == 255 and not q.signed


def test_per_tensor_scale_is_0d():
    q = quant_tensor_from_output(Int8WeightPerTensor.tensor_quant(torch.randn(4, 4)), IntFormat(8))
    assert q.scale.shape == () and q.codes().shape == (4, 4)
