import pytest

import groupquant as gq
from groupquant.formats import SpecialValues
from groupquant.inject import ConfigError
from groupquant.quantizers import (Int8ActPerTensor, MXFloat4e2m1Weight, MXFloat8e4m3Weight, MXInt8Weight,
                                   RestrictScaling, ScaleRounding, ScalingPerOutput)


def test_describe_shows_settings_and_derived_values():
    d = gq.describe(MXFloat8e4m3Weight)
    expected = {
        "bit_width": 8, "exponent_bit_width": 4, "mantissa_bit_width": 3, "signed": True, "bias": 7, "emax": 8,
        "max_normal": 448.0, "special_values": SpecialValues.NAN_ONLY, "nan_inf_rule": SpecialValues.OCP,
        "scaling_per_output": ScalingPerOutput.GROUP, "group_size": 32, "group_dim": None,
        "restrict_scaling_type": RestrictScaling.POWER_OF_TWO, "scale_rounding": ScaleRounding.FLOOR,
        "float_to_int_rounding": gq.quantizers.FloatToIntRounding.EVEN,
        "scale_rule": "power of two (E8M0): from each tensor 2^(floor(log2(abs_max)) - emax)",
    }
    assert {k: d[k] for k in expected} == expected
    assert d == MXFloat8e4m3Weight.describe()


def test_describe_lists_settings_and_derived_values_only():
    from groupquant.quantizers.vocabulary import DERIVED, SETTINGS

    d = gq.describe(MXFloat8e4m3Weight.let(group_size=16))
    assert set(d) <= set(SETTINGS) | set(DERIVED) | {"scale_rule"}
    assert not {"spec", "tensor_quant", "granularity", "element_format"} & set(d)
    assert str(d).splitlines()[0] == "MXFloat8e4m3Weight[group_size=16]"


def test_deprecated_boolean_shows_as_the_resolved_granularity():
    with pytest.warns(DeprecationWarning):
        d = gq.describe(gq.quantizers.Int8WeightPerTensor.let(scaling_per_output_channel=True))
    assert d["scaling_per_output"] is ScalingPerOutput.CHANNEL and "scaling_per_output_channel" not in d


def test_describe_prints_an_aligned_table_starting_with_the_name():
    text = str(gq.describe(MXInt8Weight))
    lines = text.splitlines()
    assert lines[0] == "MXInt8Weight"
    assert lines[1].split() == ["bit_width", "8"]
    assert any(line.split() == ["max_normal", "1.984375"] for line in lines)
    assert len({line.index(line.split()[1]) for line in lines[1:]}) == 1  # one value column


def test_describe_follows_let_and_reports_misconfiguration():
    assert gq.describe(MXFloat4e2m1Weight.let(group_size=16))["group_size"] == 16
    assert gq.describe(Int8ActPerTensor)["scale_rule"].startswith("float: running statistics")
    with pytest.raises(ConfigError, match="bit_width"):
        gq.describe(MXFloat8e4m3Weight.let(bit_width=6))


def test_describe_rejects_non_quantizers():
    with pytest.raises(TypeError, match="quantizer class"):
        gq.describe(int)


def test_settings_given_as_strings_show_as_enum_members():
    from groupquant.quantizers.settings import FloatToIntRounding

    d = gq.describe(MXFloat4e2m1Weight.let(scale_rounding="even", float_to_int_rounding="nearest"))
    assert d["scale_rounding"] is ScaleRounding.EVEN
    assert d["float_to_int_rounding"] is FloatToIntRounding.NEAREST
