import pytest

from groupquant.formats import SpecialValues
from groupquant.inject import ConfigError
from groupquant.quantizers import NanInfRule, ScaleRounding, ScalingPerOutput
from groupquant.quantizers.settings import coerce


def test_coerce_accepts_member_value_and_name():
    assert coerce("scale_rounding", ScaleRounding.CEIL, ScaleRounding) is ScaleRounding.CEIL
    assert coerce("scale_rounding", "ceil", ScaleRounding) is ScaleRounding.CEIL
    assert coerce("scale_rounding", "RCEIL", ScaleRounding) is ScaleRounding.RCEIL
    assert coerce("scaling_per_output", "group", ScalingPerOutput) is ScalingPerOutput.GROUP


def test_coerce_error_names_setting_and_choices():
    with pytest.raises(ConfigError) as info:
        coerce("scale_rounding", "up", ScaleRounding)
    assert info.value.setting == "scale_rounding"
    assert "ScaleRounding.FLOOR, ScaleRounding.CEIL" in str(info.value) and "'up'" in str(info.value)


def test_nan_inf_rule_is_the_format_cores_enum():
    assert NanInfRule is SpecialValues
    assert {m.name for m in NanInfRule} >= {"OCP", "FNUZ", "IEEE", "NONE"}
