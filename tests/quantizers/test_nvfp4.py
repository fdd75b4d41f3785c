"""NVFP4 quantizers and other scale formats give exactly groupquant.fake_quant on the same data;
misconfigurations name the setting."""
import pytest
import torch

import groupquant as gq
from groupquant.core import build_tensor_quant
from groupquant.formats import UE4M3, get_scale_format
from groupquant.inject import ConfigError
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.quantizers import (MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, NVFP4Act, NVFP4Weight,
                                   RestrictScaling, ScaleRounding, ScalingPerOutput, ScalingSource, quantizer_spec)


def _binades(shape, lo=-12, hi=12, seed=0):
    """Values spanning many binades (per column), signs mixed, a few exact zeros."""
    g = torch.Generator().manual_seed(seed)
    mag = torch.exp2(torch.randint(lo, hi, shape, generator=g).float()) * (1 + torch.rand(shape, generator=g))
    x = mag * torch.where(torch.rand(shape, generator=g) < 0.5, -1.0, 1.0)
    x.view(-1)[::11] = 0.0
    return x


def test_nvfp4_weight_spec_is_the_scheme():
    spec = quantizer_spec(NVFP4Weight)
    assert spec.fmt == gq.get_format("fp4_e2m1") and spec.scale_format == UE4M3 and spec.tensor_scale
    assert spec.group_size == 16 and spec.restrict == "fp"
    assert "ue4m3" in gq.describe(NVFP4Weight)["scale_rule"]


@pytest.mark.parametrize("tensor_scale", [True, False])
def test_nvfp4_weight_and_act_are_fake_quant(tensor_scale):
    w = _binades((24, 50))  # 50 = 3 blocks of 16 + a short one
    x = _binades((3, 7, 50), seed=1)
    wq = NVFP4Weight.let(tensor_scale=tensor_scale)
    aq = NVFP4Act.let(tensor_scale=tensor_scale)
    out_w = build_tensor_quant(quantizer_spec(wq).with_dims(1, 0))(w)
    assert torch.equal(out_w.expanded_value, gq.fake_quant(w, "nvfp4", dim=1, tensor_scale=tensor_scale))
    out_x = aq.tensor_quant(x)
    assert torch.equal(out_x.expanded_value, gq.fake_quant(x, "nvfp4", tensor_scale=tensor_scale))
    assert (out_w.tensor_scale is not None) == tensor_scale


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_nvfp4_linear_is_linear_of_fake_quant_operands(dtype):
    torch.manual_seed(0)
    layer = QuantLinear(50, 24, weight_quant=NVFP4Weight, input_quant=NVFP4Act, return_quant_tensor=False).to(dtype)
    x = _binades((5, 50), -6, 6).to(dtype).requires_grad_()
    y = layer(x)
    expected = torch.nn.functional.linear(gq.fake_quant(x, "nvfp4"), gq.fake_quant(layer.weight, "nvfp4", dim=1),
                                          layer.bias)
    assert torch.equal(y, expected)
    y.sum().backward()  # straight-through: the gradient reaches the input and the weight
    assert x.grad is not None and layer.weight.grad is not None and torch.isfinite(x.grad).all()


def test_nvfp4_quant_tensor_gives_the_codes_and_scales_of_quantize():
    torch.manual_seed(0)
    layer = QuantLinear(40, 8, weight_quant=NVFP4Weight)
    qt = layer.quant_weight()
    assert qt.scale_format == UE4M3 and qt.tensor_scale_.shape == ()
    got = qt.to_group_quantized()
    ref = gq.quantize(layer.weight.detach(), "nvfp4", dim=1)
    assert torch.equal(got.codes, ref.codes) and torch.equal(got.scale_codes, ref.scale_codes)
    assert torch.equal(got.tensor_scale, ref.tensor_scale) and torch.equal(got.scale, ref.scale)
    assert torch.equal(got.dequantize(), qt.value.detach())


def test_nvfp4_conv_weight_groups_input_channels():
    conv = QuantConv2d(20, 4, 3, weight_quant=NVFP4Weight)
    assert torch.equal(conv.quant_weight().value, gq.fake_quant(conv.weight, "nvfp4", dim=1))


@pytest.mark.parametrize("name", ["e5m0", "e4m0"])
def test_exponent_scale_formats_in_a_quantizer(name):
    q = MXFloat8e4m3Weight.let(scale_format=name)
    w = _binades((6, 64), -30, 30)
    out = build_tensor_quant(quantizer_spec(q).with_dims(1, 0))(w)
    assert torch.equal(out.expanded_value, gq.fake_quant(w, "fp8_e4m3", dim=1, scale_format=name))
    k = get_scale_format(name).max_exponent
    assert out.scale.abs().log2().abs().max() <= k  # clamped to the format's exponent range


def test_bf16_scales_in_a_quantizer():
    q = MXFloat8e4m3Act.let(restrict_scaling_type=RestrictScaling.FP, scale_format="bfloat16")
    x = _binades((4, 64))
    out = q.tensor_quant(x)
    assert torch.equal(out.expanded_value, gq.fake_quant(x, "fp8_e4m3", scale_format="bfloat16"))
    assert torch.equal(out.scale, out.scale.bfloat16().float())


def test_nvfp4_variant_without_tensor_scale_is_named_and_pickles():
    variant = NVFP4Weight.let(tensor_scale=False)
    assert variant.__name__ == "NVFP4Weight[tensor_scale=False]"
    layer = QuantLinear(32, 4, weight_quant=variant)
    import io
    buf = io.BytesIO()
    torch.save(layer, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert torch.equal(back.quant_weight().value, layer.quant_weight().value)


@pytest.mark.parametrize("overrides, setting", [
    (dict(group_size=32), "group_size"),
    (dict(scaling_per_output=ScalingPerOutput.TENSOR), "group_size"),
    (dict(scale_format="e8m0"), "scale_format"),
    (dict(scale_format="ue5m3"), "scale_format"),
    (dict(bit_width=8, exponent_bit_width=4, mantissa_bit_width=3), "bit_width"),
    (dict(scaling_source=ScalingSource.LEARNED), "scale_format"),
    (dict(block_scheme="nvfp8"), "block_scheme"),
])
def test_nvfp4_misconfigurations_name_the_setting(overrides, setting):
    with pytest.raises(ConfigError, match=setting):
        quantizer_spec(NVFP4Weight.let(**overrides))


@pytest.mark.parametrize("overrides, setting", [
    (dict(scale_format="ue4m3"), "scale_format"),         # float scales with a power-of-two rule
    (dict(scale_format="e9m0"), "scale_format"),          # no such exponent width
    (dict(scale_format="wat"), "scale_format"),
    (dict(tensor_scale=True), "tensor_scale"),            # E8M0 needs no second scale
    (dict(tensor_scale="yes"), "tensor_scale"),
])
def test_scale_format_misconfigurations_name_the_setting(overrides, setting):
    with pytest.raises(ConfigError, match=setting):
        quantizer_spec(MXFloat4e2m1Weight.let(**overrides))


def test_fp_restriction_with_an_exponent_scale_format_names_the_setting():
    with pytest.raises(ConfigError, match="scale_format"):
        quantizer_spec(MXFloat4e2m1Weight.let(restrict_scaling_type=RestrictScaling.FP, scale_format="e8m0"))


def test_microxcaling_and_torchao_names_point_to_the_settings():
    with pytest.raises(Exception, match="scale_format"):
        class Bad(MXFloat4e2m1Weight):  # noqa: F841
            scale_bits = 5


@pytest.mark.parametrize("rule", ["ceil", "even", "rceil", ScaleRounding.CEIL])
def test_a_power_of_two_rule_on_float_scales_is_refused_by_name(rule):
    """issue 17 item 13: NVFP4Weight.let(scale_rounding="ceil") was accepted and changed nothing."""
    with pytest.raises(ConfigError, match="scale_rounding"):
        quantizer_spec(NVFP4Weight.let(scale_rounding=rule))
    with pytest.raises(ConfigError, match="scale_rounding"):
        quantizer_spec(MXFloat8e4m3Act.let(restrict_scaling_type=RestrictScaling.FP, scale_rounding=rule))
    w = _binades((4, 64))  # the default rule stays accepted, and is the float rule
    out = NVFP4Weight.let(scale_rounding=ScaleRounding.FLOOR).tensor_quant(w)
    assert torch.equal(out.expanded_value, gq.fake_quant(w, "nvfp4"))


def test_ue8m0_is_e8m0_under_the_name_given():
    """issue 17: scale_format="ue8m0" (NVIDIA / DeepSeek's spelling of E8M0) was reported as "e8m0"."""
    q = MXFloat4e2m1Weight.let(scale_format="ue8m0")
    spec = quantizer_spec(q)
    assert spec.scale_format == get_scale_format("e8m0") and spec.scale_format.name == "ue8m0"
    assert "UE8M0" in spec.describe_rule()
    w = _binades((4, 64))
    assert torch.equal(q.tensor_quant(w).expanded_value, gq.fake_quant(w, "fp4_e2m1", scale_format="e8m0"))
    with pytest.raises(ConfigError, match="'?ue8m0"):
        quantizer_spec(MXFloat4e2m1Weight.let(scale_format="ue8m0", restrict_scaling_type=RestrictScaling.FP))
    with pytest.raises(ValueError, match="scale_format='ue8m0'"):
        gq.fake_quant(w, "fp4_e2m1", scale_format="ue8m0", scale_mode="float")
    with pytest.raises(ValueError, match="'ue9m0'"):
        gq.fake_quant(w, "fp4_e2m1", scale_format="ue9m0")
