"""A group-wise quant tensor keeps what the op returned: the layout object, and, from the quantize
op (QuantProxy.quantized), the codes and scale codes themselves, which codes_() and
to_group_quantized() hand on without reading them back off the values."""
import pytest
import torch

import groupquant as gq
import groupquant.quantizers as Q
import groupquant.quant_tensor.groupwise_float as groupwise_float
import groupquant.quant_tensor.groupwise_int as groupwise_int
from groupquant.nn import QuantLinear


def _no_reading_back(*args, **kwargs):
    raise AssertionError("codes were read back off the values")


@pytest.mark.parametrize("quantizer,fmt", [(Q.MXFloat4e2m1Weight, "fp4_e2m1"), (Q.NVFP4Weight, "nvfp4"),
                                           (Q.MXInt8Weight, "int8")])
def test_the_quantize_ops_codes_are_kept(monkeypatch, quantizer, fmt):
    torch.manual_seed(0)
    layer = QuantLinear(70, 6, weight_quant=quantizer)
    ref = gq.quantize(layer.weight.detach(), fmt, dim=1)
    monkeypatch.setattr(groupwise_float, "float_codes", _no_reading_back)
    monkeypatch.setattr(groupwise_int, "int_codes", _no_reading_back)
    qt = layer.weight_quant.quantized(layer.weight)
    assert qt.layout == ref.layout and qt.group_size == ref.block_size and qt.shape == (6, 70)
    assert torch.equal(qt.codes_(), ref.codes) and torch.equal(qt.op_scale_codes_, ref.scale_codes)
    q = qt.to_group_quantized()
    assert torch.equal(q.codes, ref.codes) and torch.equal(q.scale_codes, ref.scale_codes)
    assert torch.equal(qt.value, layer.quant_weight().value)  # the fake-quant pass's values, bit for bit


def test_the_fake_quant_pass_keeps_its_layout_and_reads_codes_off_values():
    layer = QuantLinear(70, 6, weight_quant=Q.MXFloat4e2m1Weight)
    qt = layer.quant_weight()
    assert qt.op_codes_ is None and qt.layout.block_size == 32 and qt.layout.dim == 1
    assert torch.equal(qt.codes_(), gq.quantize(layer.weight.detach(), "fp4_e2m1", dim=1).codes)
