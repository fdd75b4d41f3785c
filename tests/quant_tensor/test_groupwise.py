"""Group-wise quant tensors: contracted fields, expanded views, codes equal groupquant.quantize."""
import pytest
import torch

import groupquant as gq
from groupquant.quant_tensor import GroupwiseFloatQuantTensor, GroupwiseIntQuantTensor, quant_tensor_from_output
from groupquant.quantizers import (Int4WeightPerGroupFloat, MXFloat4e2m1Weight, MXFloat6e3m2Weight,
                                   MXFloat8e4m3Weight, MXFloat8e5m2Weight, MXInt8Weight)

MX = [(MXInt8Weight, "int8"), (MXFloat8e4m3Weight, "fp8_e4m3"), (MXFloat8e5m2Weight, "fp8_e5m2"),
      (MXFloat6e3m2Weight, "fp6_e3m2"), (MXFloat4e2m1Weight, "fp4_e2m1")]


def _quant(q, w):
    return quant_tensor_from_output(q.tensor_quant(w), q.element_format)


@pytest.mark.parametrize("quant, name", MX)
def test_contracted_fields_and_expanded_views(quant, name):
    w = torch.randn(16, 70)  # k = 3 groups, the last padded
    q = _quant(quant, w)
    assert q.value_.shape == (16, 3, 32) and q.scale_.shape == (16, 3, 1) and q.zero_point_.shape == (16, 3, 1)
    assert (q.group_size, q.group_dim, q.shape) == (32, 1, torch.Size([16, 70]))
    assert q.value.shape == (16, 70) and q.scale.shape == (16, 70) and q.zero_point.shape == (16, 70)
    assert torch.equal(q.value, gq.fake_quant(w, name, 32, 1))
    assert torch.equal(q.scale[:, 32:64], q.scale_[:, 1].expand(16, 32))


@pytest.mark.parametrize("quant, name", MX)
def test_to_group_quantized_equals_quantize(quant, name):
    w = torch.randn(16, 70) * 10
    w[3, 40] = float("nan")
    g = _quant(quant, w).to_group_quantized()
    ref = gq.quantize(w, name, 32, 1)
    assert torch.equal(g.codes, ref.codes)
    assert torch.equal(g.scale.nan_to_num(-1.0), ref.scale.nan_to_num(-1.0))
    assert torch.equal(g.scale_codes, ref.scale_codes)
    assert g.layout == ref.layout and g.fmt == ref.fmt


def test_mxint8_scale_and_int_codes():
    w = torch.randn(4, 64)
    q = _quant(MXInt8Weight, w)
    assert isinstance(q, GroupwiseIntQuantTensor) and q.bit_width == 8
    ref = gq.quantize(w, "int8", 32, 1)
    assert torch.equal(q.scale_ * 64, ref.scale)  # value = int * scale_; X = 64 * scale_ (1.6 fixed point)
    assert torch.equal(q.int_(), ref.codes) and torch.equal(q.int(), ref.codes.reshape(4, 64))
    assert torch.equal(q.int().float() * q.scale, q.value)


def test_float_elements_and_codes():
    w = torch.randn(4, 64)
    q = _quant(MXFloat4e2m1Weight, w)
    assert isinstance(q, GroupwiseFloatQuantTensor)
    assert (q.exponent_bit_width, q.mantissa_bit_width, q.bit_width) == (2, 1, 4)
    assert torch.equal(q.minifloat() * q.scale, q.value)
    assert set(q.minifloat().abs().unique().tolist()) <= {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0}
    assert torch.equal(q.codes(), gq.quantize(w, "fp4_e2m1").codes.reshape(4, 64))


def test_float_scales_have_no_e8m0_codes():
    w = torch.randn(4, 256)
    g = _quant(Int4WeightPerGroupFloat, w).to_group_quantized()
    assert g.scale_codes is None and torch.equal(g.dequantize(), _quant(Int4WeightPerGroupFloat, w).value)


def test_gradient_flows_through_contracted_value():
    w = torch.randn(8, 70, requires_grad=True)
    q = _quant(MXFloat8e4m3Weight, w)
    (torch.randn(2, 70) @ q.t()).sum().backward()
    assert w.grad.shape == w.shape and torch.isfinite(w.grad).all()
