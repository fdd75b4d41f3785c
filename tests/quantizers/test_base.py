import pytest

from groupquant.inject import UnknownSettingError
from groupquant.quantizers import Int8WeightPerTensor, MXFloat4e2m1Weight, MXFloat8e4m3Act


def test_typo_in_let_is_an_error_with_the_closest_setting():
    with pytest.raises(ValueError) as info:
        MXFloat4e2m1Weight.let(bitwidth=4)
    assert isinstance(info.value, UnknownSettingError)
    assert "'bitwidth'" in str(info.value) and "did you mean 'bit_width'?" in str(info.value)
    with pytest.raises(ValueError, match="did you mean 'group_size'"):
        MXFloat8e4m3Act.let(groupsize=16)
    with pytest.raises(ValueError, match="did you mean 'scaling_per_output'"):
        Int8WeightPerTensor.let(scaling_per_outputs="channel")


def test_let_changes_only_the_derived_quantizer():
    q = MXFloat4e2m1Weight.let(group_size=16)
    assert (q.group_size, MXFloat4e2m1Weight.group_size) == (16, 32)
    assert issubclass(q, MXFloat4e2m1Weight)
