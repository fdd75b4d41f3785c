"""Subclass-override table: resolved settings and outputs equal the format core's."""
import pytest
import torch

import groupquant as gq
from groupquant.formats import FloatFormat, IntFormat, SpecialValues
from groupquant.inject import ConfigError
from groupquant.quantizers import (Fp8e4m3ActPerTensor, Fp8e4m3WeightPerTensor, Int4WeightPerGroupFloat,
                                   Int8ActPerTensor, Int8WeightPerChannel, Int8WeightPerTensor, Int16BiasPerTensor,
                                   MXFloat4e2m1Act, MXFloat4e2m1Weight, MXFloat6e2m3Act, MXFloat6e2m3Weight,
                                   MXFloat6e3m2Act, MXFloat6e3m2Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight,
                                   MXFloat8e5m2Act, MXFloat8e5m2Weight, MXInt8Act, MXInt8Weight, NanInfRule,
                                   RestrictScaling, ScalingPerOutput, Uint8ActPerTensor)


class MyFP6(MXFloat8e4m3Weight):
    bit_width = 6
    exponent_bit_width = 2
    mantissa_bit_width = 3


class MyE3M4(MXFloat8e4m3Weight):
    exponent_bit_width = 3
    mantissa_bit_width = 4


class MyE5M2Act(MXFloat8e4m3Act):
    exponent_bit_width = 5
    mantissa_bit_width = 2


class MyFP4Unsigned(MXFloat4e2m1Weight):
    bit_width = 3
    signed = False


class MyFNUZ(MXFloat8e4m3Weight):
    nan_inf_rule = NanInfRule.FNUZ


class MyInt4(MXInt8Weight):
    bit_width = 4


class MyInt6Wide(MXInt8Weight):
    bit_width = 6
    narrow_range = False


# quantizer -> the format core's object for the same widths (the independent side of the table)
DEFAULTS = [
    (MXFloat8e4m3Weight, FloatFormat(4, 3)), (MXFloat8e4m3Act, FloatFormat(4, 3)),
    (MXFloat8e5m2Weight, FloatFormat(5, 2)), (MXFloat8e5m2Act, FloatFormat(5, 2)),
    (MXFloat6e3m2Weight, FloatFormat(3, 2)), (MXFloat6e3m2Act, FloatFormat(3, 2)),
    (MXFloat6e2m3Weight, FloatFormat(2, 3)), (MXFloat6e2m3Act, FloatFormat(2, 3)),
    (MXFloat4e2m1Weight, FloatFormat(2, 1)), (MXFloat4e2m1Act, FloatFormat(2, 1)),
    (MXInt8Weight, IntFormat(8)), (MXInt8Act, IntFormat(8)),
    (Int8WeightPerTensor, IntFormat(8)), (Int8WeightPerChannel, IntFormat(8)),
    (Int4WeightPerGroupFloat, IntFormat(4)), (Int8ActPerTensor, IntFormat(8, narrow_range=False)),
    (Uint8ActPerTensor, IntFormat(8, signed=False, narrow_range=False)),
    (Fp8e4m3WeightPerTensor, FloatFormat(4, 3)), (Fp8e4m3ActPerTensor, FloatFormat(4, 3)),
    (Int16BiasPerTensor, IntFormat(16)),
]
SUBCLASSES = [
    (MyFP6, FloatFormat(2, 3)),
    (MyE3M4, FloatFormat(3, 4)),
    (MyE5M2Act, FloatFormat(5, 2)),
    (MyFP4Unsigned, FloatFormat(2, 1, signed=False)),
    (MyFNUZ, FloatFormat(4, 3, SpecialValues.FNUZ)),
    (MXInt8Weight, IntFormat(8)),
    (MyInt4, IntFormat(4)),
    (MyInt6Wide, IntFormat(6, narrow_range=False)),
]
TABLE = DEFAULTS + SUBCLASSES
MX_STYLE = [(q, f) for q, f in TABLE
            if q.granularity is ScalingPerOutput.GROUP and q.restrict_scaling_type is RestrictScaling.POWER_OF_TWO]


@pytest.mark.parametrize("quant, fmt", TABLE, ids=lambda v: getattr(v, "__name__", ""))
def test_resolved_values_equal_format_core(quant, fmt):
    assert quant.element_format == fmt
    assert quant.max_normal == fmt.max_normal and quant.emax == fmt.emax
    assert quant.min_subnormal == fmt.min_subnormal
    if isinstance(fmt, FloatFormat):
        assert quant.special_values is fmt.special_values and quant.bias == fmt.bias
    else:
        assert (quant.qmin, quant.qmax) == (fmt.qmin, fmt.qmax)


def test_table_covers_every_default():
    from groupquant.quantizers import defaults, mx

    bases = {"IntQuantizer", "MXScaling", "MXQuantizerPair", "MX_QUANTIZERS", "MSEScaling"}
    exported = {name for name in mx.__all__ + defaults.__all__
                if name.startswith(("MX", "Int", "Uint", "Fp")) and not name.endswith("MSE")} - bases
    assert exported == {q.__name__ for q, _ in DEFAULTS}


@pytest.mark.parametrize("quant, fmt", MX_STYLE, ids=lambda v: getattr(v, "__name__", ""))
def test_outputs_equal_fake_quant_with_that_format(quant, fmt):
    x = torch.randn(8, 96) * 5
    x = x.abs() if not fmt.signed else x
    out = quant.tensor_quant(x)
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(x, fmt, 32, -1))  # dim 1 is the last dim


def test_spec_facts_of_subclassed_widths():
    """Hand facts (OCP MX v1.0 table): FP6 E2M3 max 7.5, no specials; e3m4 8-bit is NaN-only."""
    assert (MyFP6.max_normal, MyFP6.special_values) == (7.5, SpecialValues.NONE)
    assert MyFP6.describe() == MXFloat6e2m3Weight.describe()
    assert MyE3M4.special_values is SpecialValues.NAN_ONLY
    assert MyE3M4.max_normal == 30.0  # bias 3, emax 4, 1.1110b * 2**4 (1.1111b is NaN)
    assert MyE5M2Act.max_normal == 57344.0 and MyE5M2Act.special_values is SpecialValues.IEEE
    assert MyFNUZ.bias == 8 and MyFNUZ.max_normal == 240.0
    assert MyInt4.max_normal == 7 / 4 and MyInt4.emax == 0


@pytest.mark.parametrize("overrides, setting", [
    ({"bit_width": 8, "exponent_bit_width": 3}, "bit_width"),
    ({"bit_width": 5}, "bit_width"),
    ({"exponent_bit_width": 0}, "exponent_bit_width"),
    ({"mantissa_bit_width": -1}, "mantissa_bit_width"),
    ({"bit_width": 5.0}, "bit_width"),
    ({"nan_inf_rule": "ieee", "mantissa_bit_width": 0, "exponent_bit_width": 7}, "nan_inf_rule"),
    ({"nan_inf_rule": NanInfRule.FNUZ, "signed": False, "bit_width": 7}, "nan_inf_rule"),
    ({"nan_inf_rule": "sometimes"}, "nan_inf_rule"),
    ({"exponent_bit_width": 9, "mantissa_bit_width": 2, "bit_width": 12}, "exponent_bit_width"),
    ({"exponent_bias": 200}, "exponent_bias"),
    ({"exponent_bias": 1.5}, "exponent_bias"),
    ({"signed": 1}, "signed"),
])
def test_float_misconfiguration_names_the_setting_at_build(overrides, setting):
    quant = MXFloat8e4m3Weight.let(**overrides)  # building is what fails, not declaring
    with pytest.raises(ConfigError) as info:
        quant.tensor_quant
    assert info.value.setting == setting


@pytest.mark.parametrize("overrides, setting", [
    ({"bit_width": 1}, "bit_width"), ({"bit_width": 17}, "bit_width"), ({"narrow_range": None}, "narrow_range"),
])
def test_int_misconfiguration_names_the_setting(overrides, setting):
    with pytest.raises(ConfigError) as info:
        MXInt8Weight.let(**overrides).tensor_quant
    assert info.value.setting == setting


def test_misconfiguration_message_gives_the_sum():
    with pytest.raises(ValueError, match=r"bit_width=8 but exponent_bit_width=3 \+ mantissa_bit_width=3 \+ sign 1 = 7"):
        MXFloat8e4m3Weight.let(exponent_bit_width=3).tensor_quant


@pytest.mark.parametrize("name, given", [("max_normal", 100.0), ("emax", 3), ("bias", 3), ("qmax", 100)])
def test_derived_values_cannot_be_overridden(name, given):
    quant = MXInt8Weight if name == "qmax" else MXFloat8e4m3Weight
    with pytest.raises(ConfigError, match="is derived .* cannot be set") as info:
        quant.let(**{name: given})
    assert info.value.setting == name
