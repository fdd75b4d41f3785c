"""Quantizer class bodies, let() and layer keywords are checked against the settings vocabulary;
variants are named for what differs; everything resolves once into one cached spec."""
import io
import pickle

import pytest
import torch

import groupquant as gq
from groupquant.core import QuantSpec
from groupquant.inject import ConfigError, UnknownSettingError
from groupquant.nn import QuantLinear
from groupquant.quantizers import (MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXInt8Weight,
                                   quantizer_spec)
from groupquant.quantizers.format_solvers import float_element_format
from groupquant.inject import value


def test_a_misspelt_setting_fails_when_the_class_is_defined():
    with pytest.raises(UnknownSettingError, match="'group_sise'.*did you mean 'group_size'"):
        class Bad(MXFloat8e4m3Weight):  # noqa: F841
            group_sise = 16


@pytest.mark.parametrize("name", ["max_normal", "emax", "bias", "qmax", "element_format", "format_name"])
def test_derived_names_cannot_be_set_in_a_body(name):
    with pytest.raises(ConfigError, match=f"{name} is derived") as info:
        type("Bad", (MXInt8Weight if name == "qmax" else MXFloat8e4m3Weight,), {name: 3})
    assert info.value.setting == name


@pytest.mark.parametrize("name, ours", [("scaling_per_output_type", "scaling_per_output"),
                                        ("restrict_value_float_to_int_impl", "scale_rounding"),
                                        ("nan_values", "nan_inf_rule"), ("inf_values", "nan_inf_rule"),
                                        ("float_to_int_impl_type", "float_to_int_rounding"),
                                        ("block_size", "group_size")])
def test_other_libraries_names_get_groupquants_name(name, ours):
    with pytest.raises(UnknownSettingError, match=ours):
        type("Bad", (MXFloat8e4m3Weight,), {name: 1})
    with pytest.raises(UnknownSettingError, match=ours):
        MXFloat8e4m3Weight.let(**{name: 1})
    with pytest.raises(UnknownSettingError, match=f"'weight_{name}'.*{ours}"):
        QuantLinear(8, 8, weight_quant=MXFloat8e4m3Weight, **{f"weight_{name}": 1})


def test_solvers_and_declared_extra_settings_are_allowed():
    class Custom(MXFloat8e4m3Weight):
        __extra_settings__ = ("my_knob",)
        my_knob = 3
        helper = value(lambda my_knob: my_knob * 2)

    assert Custom.helper == 6 and quantizer_spec(Custom).group_size == 32
    assert Custom.let(my_knob=4).helper == 8


def test_let_variants_are_named_for_what_differs_and_layers_print_it():
    v = MXFloat4e2m1Weight.let(scale_rounding=gq.quantizers.ScaleRounding.EVEN)
    assert v.__name__ == "MXFloat4e2m1Weight[scale_rounding=even]"
    assert v.let(group_size=16).__name__ == "MXFloat4e2m1Weight[scale_rounding=even, group_size=16]"
    layer = QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight, weight_scale_rounding="even")
    assert "quantizer=MXFloat4e2m1Weight[scale_rounding=even]" in repr(layer)
    assert str(gq.describe(layer.weight_quant)).splitlines()[0] == "MXFloat4e2m1Weight[scale_rounding=even]"
    assert quantizer_spec(v).name == v.__name__


def test_layers_with_let_quantizers_pickle_and_torch_save():
    layer = QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight.let(group_size=16),
                        input_quant=MXFloat8e4m3Act.let(scale_rounding="even"))
    x = torch.randn(3, 64)
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    buffer.seek(0)
    back = torch.load(buffer, weights_only=False)
    assert torch.equal(back(x), layer(x))
    assert back.weight_quant.quantizer.__name__ == "MXFloat4e2m1Weight[group_size=16]"
    assert torch.equal(pickle.loads(pickle.dumps(layer))(x), layer(x))


def test_the_spec_is_resolved_once_per_class():
    calls = []

    def counted_format(bit_width, exponent_bit_width, mantissa_bit_width, signed, nan_inf_rule, exponent_bias):
        calls.append(1)
        return float_element_format(bit_width, exponent_bit_width, mantissa_bit_width, signed, nan_inf_rule,
                                    exponent_bias)

    class Fresh(MXFloat8e4m3Weight):
        element_format = value(counted_format)

    first = quantizer_spec(Fresh)
    for _ in range(3):
        layer = QuantLinear(16, 16, weight_quant=Fresh, input_quant=Fresh)
        layer(torch.randn(2, 16))
    assert len(calls) == 1
    assert quantizer_spec(Fresh) is first and isinstance(first, QuantSpec)
    assert layer.weight_quant.spec == first.with_dims(1, 0) and layer.weight_quant.spec.fmt is first.fmt
    assert hash(first) == hash(quantizer_spec(Fresh))  # frozen and hashable


def test_saturating_false_needs_inf_or_nan_codes():
    with pytest.raises(ConfigError) as info:
        quantizer_spec(MXFloat4e2m1Weight.let(saturating=False))
    assert info.value.setting == "saturating"
    assert quantizer_spec(MXFloat8e4m3Weight.let(saturating=False)).saturating is False


def test_learned_scale_names_do_not_collide_with_common_module_names():
    learned = type("LearnedMXFP4", (gq.quantizers.LearnedScaling, MXFloat4e2m1Weight), {})
    layer = QuantLinear(64, 8, weight_quant=learned)
    names = [n for n, _ in layer.named_parameters()]
    assert "weight_quant.tensor_quant.scale_impl.learned_scale" in names
    assert not any(n.split(".")[-1] in {"value", "key", "query", "weight", "bias"} for n in names if "quant" in n)


def test_a_solver_overriding_a_derived_value_is_refused_when_resolved():
    class Sneaky(MXFloat8e4m3Weight):
        max_normal = value(lambda: 500.0)

    with pytest.raises(ConfigError) as info:
        quantizer_spec(Sneaky)
    assert info.value.setting == "max_normal"


@pytest.mark.parametrize("name", ["MXFloat8e4m3WeightMSE", "MXFloat6e2m3WeightMSE", "MXFloat4e2m1WeightMSE",
                                  "MXInt8WeightMSE"])
def test_mse_quantizers_use_the_mse_search_along_the_input_features(name):
    from groupquant.core import ScaleGranularity, mse_scale
    from groupquant.ops import round_to_format

    quant = getattr(gq.quantizers, name)
    g = torch.Generator().manual_seed(5)
    w = torch.randn(16, 70, generator=g) * torch.logspace(-3, 3, 70)
    layer = QuantLinear(70, 16, weight_quant=quant)
    layer.weight.data.copy_(w)
    qt = layer.quant_weight()
    fmt = qt.fmt
    scale = mse_scale(w, fmt, ScaleGranularity("group", 1, 32))
    assert torch.equal(qt.scale_, scale)
    layout = qt.layout
    expected = layout.expand(round_to_format(layout.contract(w) / scale, fmt, "even") * scale)
    assert torch.equal(qt.value, expected)
    x = torch.randn(3, 70)
    assert torch.equal(layer(x), torch.nn.functional.linear(x, expected, layer.bias))


def test_element_precision_rounds_the_tensor_before_it_is_quantized():
    from groupquant.ops.precision import round_to_precision

    g = torch.Generator().manual_seed(12)
    x = torch.randn(4, 70, generator=g) * torch.logspace(-3, 3, 70)
    layer = QuantLinear(70, 8, input_quant=MXFloat8e4m3Act, input_element_precision="bfloat12")
    expected = gq.fake_quant(round_to_precision(x, "bfloat12"), "fp8_e4m3", 32, -1)
    assert torch.equal(layer.input_quant.quant_value(x), expected)
    assert not torch.equal(expected, gq.fake_quant(x, "fp8_e4m3", 32, -1))  # the pre-rounding shows
    xi = x.clone().requires_grad_(True)
    layer.input_quant.quant_value(xi).sum().backward()
    assert torch.equal(xi.grad, torch.ones_like(x))  # straight through
    with pytest.raises(ConfigError) as info:
        QuantLinear(70, 8, input_quant=MXFloat8e4m3Act, input_element_precision="e9m7")
    assert info.value.setting == "input_element_precision"
