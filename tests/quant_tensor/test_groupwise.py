"""Group-wise quant tensors: contracted fields, expanded views, codes equal groupquant.quantize."""
import pytest
import torch

import groupquant as gq
from groupquant.core import QuantSpec, build_tensor_quant
from groupquant.formats import MX_FORMATS, IntFormat, SpecialValues, get_format
from groupquant.quant_tensor import GroupwiseFloatQuantTensor, GroupwiseIntQuantTensor, quant_tensor_from_output
from groupquant.quantizers import (MX_QUANTIZERS, Int4WeightPerGroupFloat, MXFloat4e2m1Weight, MXFloat6e3m2Weight,
                                   MXFloat8e4m3Weight, MXFloat8e5m2Weight, MXInt8Weight, quantizer_spec)

MX = [(MXInt8Weight, "int8"), (MXFloat8e4m3Weight, "fp8_e4m3"), (MXFloat8e5m2Weight, "fp8_e5m2"),
      (MXFloat6e3m2Weight, "fp6_e3m2"), (MXFloat4e2m1Weight, "fp4_e2m1")]


def _quant_spec(spec, w):
    return quant_tensor_from_output(build_tensor_quant(spec)(w), spec)


def _quant(q, w):
    return _quant_spec(quantizer_spec(q).with_dims(1, 0), w)  # a weight: groups along dim 1


@pytest.mark.parametrize("quant, name", MX)
def test_contracted_fields_and_expanded_views(quant, name):
    w = torch.randn(16, 70)  # k = 3 groups, the last padded
    q = _quant(quant, w)
    assert q.value_.shape == (16, 3, 32) and q.scale_.shape == (16, 3, 1) and q.zero_point_.shape == (16, 3, 1)
    assert (q.group_size, q.group_dim, q.shape) == (32, 1, torch.Size([16, 70]))
    assert q.value.shape == (16, 70) and q.scale.shape == (16, 70) and q.zero_point.shape == (16, 70)
    assert torch.equal(q.value, gq.fake_quant(w, name, 32, 1))
    assert torch.equal(q.scale[:, 32:64], q.scale_[:, 1].expand(16, 32))
    assert q.num_groups == 3 and q.layout.dim == 1


@pytest.mark.parametrize("quant, name", MX)
def test_standalone_tensor_quant_groups_along_the_last_dim(quant, name):
    w = torch.randn(16, 70)
    q = quant_tensor_from_output(quant.tensor_quant(w), quantizer_spec(quant))
    assert q.group_dim == 1 and torch.equal(q.value, gq.fake_quant(w, name, 32, 1))


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
    # scale_ is the shared scale X as produced (the E8M0 power of two); the elements are 1.6 fixed
    # point, so value = int * int_scale_ with int_scale_ = X / 64
    assert torch.equal(q.scale_, ref.scale) and torch.equal(q.shared_scale_(), ref.scale)
    assert torch.equal(q.int_scale_ * 64, ref.scale)
    assert torch.equal(q.int_(), ref.codes) and torch.equal(q.int(), ref.codes.reshape(4, 64))
    assert torch.equal(q.int_().float() * q.int_scale_, q.value_)
    assert torch.equal(q.int().float() * q.scale / 64, q.value)
    assert torch.equal(q.int().float() / 64 * q.scale, q.value)


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


# --- bit-exact codes and E8M0 bytes for every MX format and fixed-point integer formats ---------

def _mx_weight_spec(name):
    return lambda dim: quantizer_spec(MX_QUANTIZERS[name].weight).with_dims(dim, 0)


def _mx_act_spec(name):
    return lambda dim: quantizer_spec(MX_QUANTIZERS[name].act).with_dims(dim, dim)


def _format_spec(fmt):
    return lambda dim: QuantSpec("test", fmt, group_size=32, group_dim=dim)


def _let_spec(**settings):
    return lambda dim: quantizer_spec(MXInt8Weight.let(**settings)).with_dims(dim, 0)


SOURCES = ([pytest.param(_mx_weight_spec(name), id=f"{name}-weight") for name in MX_FORMATS]
           + [pytest.param(_mx_act_spec(name), id=f"{name}-act") for name in MX_FORMATS]
           + [pytest.param(_format_spec(IntFormat(8)), id="int8-1.6"),
              pytest.param(_format_spec(IntFormat(4, frac_bits=0)), id="int4-4.0"),
              pytest.param(_format_spec(IntFormat(6, frac_bits=3)), id="int6-3.3"),
              pytest.param(_format_spec(IntFormat(8, narrow_range=False, frac_bits=0)), id="int8-wide-8.0"),
              pytest.param(_format_spec(IntFormat(4, signed=False)), id="uint4"),
              pytest.param(_let_spec(bit_width=4), id="let-int4"),
              pytest.param(_let_spec(bit_width=6), id="let-int6")])


def _binades_data(dim, dtype):
    """Values spanning many binades (per element and per group), a zero group, and a grouped dim of
    70 (two full groups of 32 and a padded one)."""
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(9, 70, generator=gen)
    x = x * torch.exp2(torch.randint(-6, 7, (9, 70), generator=gen).float())  # per element
    x = x * torch.exp2(torch.randint(-20, 21, (9, 3), generator=gen).float()).repeat_interleave(32, 1)[:, :70]
    x[2, 32:64] = 0.0  # a zero group
    x[4, 64:] = 0.0  # the padded group all zero
    x[5, 3] = -0.0
    x = x.to(dtype)
    return x if dim == 1 else x.t().contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("make_spec", SOURCES)
def test_codes_and_scale_bytes_are_quantize_bit_for_bit(make_spec, dim, dtype):
    spec = make_spec(dim)
    x = _binades_data(dim, dtype)
    qt = _quant_spec(spec, x)
    kind = GroupwiseIntQuantTensor if isinstance(spec.fmt, IntFormat) else GroupwiseFloatQuantTensor
    assert isinstance(qt, kind) and qt.fmt is spec.fmt and qt.group_dim == dim
    ref = gq.quantize(x, spec.fmt, 32, dim)
    assert ref.layout.num_groups == 3 and bool((ref.scale_codes == 0).any())  # padding and the zero group
    assert qt.dtype == dtype and qt.value_.dtype == dtype
    assert torch.equal(qt.value, gq.fake_quant(x, spec.fmt, 32, dim))
    codes = qt.codes_()
    assert codes.dtype == ref.codes.dtype and torch.equal(codes, ref.codes)
    assert torch.equal(qt.codes(), ref.layout.expand(ref.codes))
    g = qt.to_group_quantized()
    assert g.fmt is spec.fmt and g.layout == ref.layout and g.dtype == dtype
    assert torch.equal(g.codes, ref.codes)
    assert g.scale_codes is not None and g.scale_codes.dtype == torch.uint8
    assert torch.equal(g.scale_codes, ref.scale_codes) and torch.equal(g.scale, ref.scale)
    assert torch.equal(qt.scale_, ref.scale)  # the E8M0 scale as produced, also for integer formats
    assert torch.equal(g.dequantize(), qt.value)


@pytest.mark.parametrize("name", MX_FORMATS)
def test_quant_tensor_keeps_the_spec_format_object(name):
    spec = quantizer_spec(MX_QUANTIZERS[name].weight).with_dims(1, 0)
    qt = _quant_spec(spec, torch.randn(4, 64))
    assert qt.fmt is spec.fmt and qt.fmt is quantizer_spec(MX_QUANTIZERS[name].weight).fmt
    for other in (qt.detach(), qt.clone(), qt.to(torch.bfloat16)):
        assert other.fmt is spec.fmt
    assert qt.to_group_quantized().fmt is spec.fmt


@pytest.mark.parametrize("name, nan_values, inf_values, rule", [
    ("fp8_e4m3", ("111",), None, SpecialValues.NAN_ONLY),
    ("fp8_e5m2", ("01", "10", "11"), ("00",), SpecialValues.IEEE),
    ("fp6_e3m2", None, None, SpecialValues.NONE),
    ("fp6_e2m3", None, None, SpecialValues.NONE),
    ("fp4_e2m1", None, None, SpecialValues.NONE),
    ("int8", None, None, None),
])
def test_brevitas_attributes_read_off_the_format(name, nan_values, inf_values, rule):
    spec = quantizer_spec(MX_QUANTIZERS[name].weight).with_dims(1, 0)
    qt = _quant_spec(spec, torch.randn(4, 64))
    fmt = get_format(name)
    assert qt.nan_values == nan_values and qt.inf_values == inf_values
    assert qt.bit_width == fmt.bit_width and qt.signed and bool(qt.signed_t) and not bool(qt.training_t)
    if rule is None:
        assert isinstance(qt, GroupwiseIntQuantTensor) and qt.narrow_range and qt.fmt.frac_bits == 6
    else:
        assert isinstance(qt, GroupwiseFloatQuantTensor) and qt.nan_inf_rule is rule and not qt.narrow_range
        assert (qt.exponent_bit_width, qt.mantissa_bit_width, qt.exponent_bias) == (
            fmt.exponent_bit_width, fmt.mantissa_bit_width, fmt.bias)
