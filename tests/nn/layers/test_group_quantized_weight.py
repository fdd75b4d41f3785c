"""group_quantized_weight(): the one accessor of a quant layer's group-quantized weight equals the
quant tensor's own codes / scales bit for bit, whether the codes come from the quantize op or the
quant tensor, and names the layer when the weight is float or not group-wise."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch

import groupquant.quantizers as Q
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.nn.layers.group_quantized_weight import WeightNotGroupQuantized, codes_from_the_op


class MXInt4Weight(Q.MXInt8Weight):
    bit_width = 4


WEIGHTS = [Q.MXFloat4e2m1Weight, Q.MXFloat6e2m3Weight, Q.MXFloat6e3m2Weight, Q.MXFloat8e4m3Weight,
           Q.MXFloat8e5m2Weight, Q.MXInt8Weight, MXInt4Weight, Q.NVFP4Weight, Q.NVFP4Weight.let(tensor_scale=False),
           Q.MXFloat8e4m3Weight.let(scale_format="e5m0"), Q.Int4WeightPerGroupFloat,
           Q.MXFloat4e2m1Weight.let(scale_rounding="ceil"), Q.MXFloat4e2m1Weight.let(group_size=16)]


def same(a, b):
    """Equal tensors, NaN equal to NaN (scales of NaN groups), or both None."""
    if a is None or b is None:
        return a is None and b is None
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(torch.nan_to_num(a.float(), 7.0),
                                                                      torch.nan_to_num(b.float(), 7.0))


def assert_same_quantized(got, ref):
    assert (got.fmt, got.layout, got.dtype, got.scale_format) == (ref.fmt, ref.layout, ref.dtype, ref.scale_format)
    assert same(got.codes, ref.codes) and same(got.scale, ref.scale) and same(got.scale_codes, ref.scale_codes)
    assert same(got.tensor_scale if got.tensor_scale is None else got.tensor_scale.reshape(()),
                ref.tensor_scale if ref.tensor_scale is None else ref.tensor_scale.reshape(()))


@pytest.mark.parametrize("wq", WEIGHTS, ids=lambda q: q.__name__)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_the_quant_tensor_codes(wq, dtype):
    torch.manual_seed(0)
    layer = QuantLinear(70, 24, weight_quant=wq, dtype=dtype)
    with torch.no_grad():
        layer.weight[0, :5] = 0.0
        layer.weight[1, 3] = 1e4
        ref = layer.quant_weight().to_group_quantized()
    got = layer.group_quantized_weight()
    assert_same_quantized(got, ref)
    assert torch.equal(got.dequantize(), layer.quant_weight().value)


def test_conv_weight_and_the_op_route_is_taken_for_mx():
    torch.manual_seed(1)
    layer = QuantConv2d(5, 8, 3, weight_quant=Q.MXFloat4e2m1Weight, weight_group_size=16)
    assert codes_from_the_op(layer.weight_quant)
    with torch.no_grad():
        ref = layer.quant_weight().to_group_quantized()
    assert_same_quantized(layer.group_quantized_weight(), ref)


def test_stochastic_rounding_reads_the_quant_tensor():
    layer = QuantLinear(64, 4, weight_quant=Q.MXFloat4e2m1Weight, weight_float_to_int_rounding="stochastic")
    assert not codes_from_the_op(layer.weight_quant)
    q = layer.group_quantized_weight()
    assert q.codes.shape == (4, 2, 32)


@pytest.mark.parametrize("layer,match", [
    (QuantLinear(8, 4), "head: weight_quant is None"),
    (QuantLinear(8, 4, weight_quant=Q.Int8WeightPerChannel), "head: .*Int8WeightPerChannel is not group-wise"),
    (QuantLinear(8, 4, weight_quant=Q.Int8WeightPerTensor), "head: .*per-tensor"),
])
def test_float_or_not_group_wise_is_one_named_error(layer, match):
    with pytest.raises(WeightNotGroupQuantized, match=match):
        layer.group_quantized_weight("head")


@settings(max_examples=25, deadline=None)
@given(out_features=st.integers(1, 9), in_features=st.integers(1, 80), group=st.sampled_from([8, 16, 32]),
       quant=st.sampled_from([Q.MXFloat4e2m1Weight, Q.MXFloat6e3m2Weight, Q.MXInt8Weight, Q.NVFP4Weight]),
       scale=st.sampled_from([1e-30, 1.0, 1e30]), seed=st.integers(0, 2 ** 16))
def test_any_shape_and_group_size_equals_the_quant_tensor(out_features, in_features, group, quant, scale, seed):
    if quant is Q.NVFP4Weight:
        group = 16  # NVFP4 has blocks of 16 only
    torch.manual_seed(seed)
    layer = QuantLinear(in_features, out_features, weight_quant=quant, weight_group_size=group)
    with torch.no_grad():
        layer.weight.mul_(scale)
        ref = layer.quant_weight().to_group_quantized()
    assert_same_quantized(layer.group_quantized_weight(), ref)
