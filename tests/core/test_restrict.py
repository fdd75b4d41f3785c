import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from groupquant.core import QuantSpec
from groupquant.core.restrict import from_learned, scale_from_stat, to_learned
from groupquant.formats import FloatFormat, IntFormat
from groupquant.inject import ConfigError
from groupquant.quantizers import Int8WeightPerTensor, MXFloat4e2m1Weight, quantizer_spec


def test_float_scale_is_stat_over_max_normal():
    stat = torch.tensor([448.0, 1.0, 0.0])
    expected = torch.tensor([1.0, 1.0, 1.0]) / torch.tensor([1.0, 448.0, 1.0])
    assert torch.equal(scale_from_stat(stat, FloatFormat(4, 3), "float"), expected)


@given(st.floats(min_value=2.0 ** -100, max_value=2.0 ** 100, allow_nan=False))
def test_power_of_two_floor_rule(a):
    """OCP: 2**(floor(log2 amax) - emax), exponent from math.frexp (exact)."""
    stat = torch.tensor(a, dtype=torch.float32)
    expected = 2.0 ** (math.frexp(stat.item())[1] - 1 - FloatFormat(2, 1).emax)
    assert scale_from_stat(stat, FloatFormat(2, 1), "floor").item() == expected


@pytest.mark.parametrize("mode", ["float", "floor"])
def test_nan_statistic_gives_nan_scale(mode):
    assert torch.isnan(scale_from_stat(torch.tensor(float("nan")), IntFormat(8), mode)).item()


def test_default_mode_is_the_ocp_floor_rule():
    stat = torch.tensor([3.0, 0.75])
    assert torch.equal(scale_from_stat(stat, FloatFormat(2, 1)), scale_from_stat(stat, FloatFormat(2, 1), "floor"))


@pytest.mark.parametrize("restrict, rounding, mode", [("fp", "floor", "float"), ("fp", "rceil", "float"),
                                                      ("power_of_two", "floor", "floor"),
                                                      ("power_of_two", "ceil", "ceil"),
                                                      ("power_of_two", "even", "even"),
                                                      ("power_of_two", "rceil", "rceil")])
def test_spec_scale_mode_from_restriction_and_rule(restrict, rounding, mode):
    assert QuantSpec("t", IntFormat(8), restrict=restrict, scale_rounding=rounding).scale_mode == mode


def test_quantizer_specs_resolve_the_scale_mode():
    assert quantizer_spec(MXFloat4e2m1Weight).scale_mode == "floor"
    assert quantizer_spec(MXFloat4e2m1Weight.let(scale_rounding="rceil")).scale_mode == "rceil"
    assert quantizer_spec(Int8WeightPerTensor).scale_mode == "float"


def test_bad_restriction_and_mode():
    with pytest.raises(ValueError, match="scale_mode must be"):
        scale_from_stat(torch.tensor(1.0), IntFormat(8), "log")
    with pytest.raises(ValueError, match="scale_mode must be"):  # a restriction is not a mode
        scale_from_stat(torch.tensor(1.0), IntFormat(8), "power_of_two")
    # restriction and power-of-two rule are checked where a quantizer resolves into its spec
    with pytest.raises(ConfigError) as info:
        MXFloat4e2m1Weight.let(restrict_scaling_type="log").spec
    assert info.value.setting == "restrict_scaling_type"
    for bad in ("float", "bogus"):  # 'float' is a scale mode, not a power-of-two rule
        with pytest.raises(ConfigError) as info:
            MXFloat4e2m1Weight.let(scale_rounding=bad).spec
        assert info.value.setting == "scale_rounding" and "scale_rounding" in str(info.value)


def test_learned_power_of_two_round_trip_and_gradient():
    scale = torch.tensor([2.0 ** -3, 2.0 ** 5, 1.0])
    p = to_learned(scale, "power_of_two")
    assert p.tolist() == [-3.0, 5.0, 0.0]
    p = (p + torch.tensor([0.4, -0.4, 0.6])).requires_grad_()
    s = from_learned(p, "power_of_two", 1e-9)
    assert s.tolist() == [2.0 ** -3, 2.0 ** 5, 2.0]
    s.sum().backward()
    assert torch.allclose(p.grad, s.detach() * math.log(2.0))


def test_learned_fp_is_positive():
    p = torch.tensor([0.5, -0.25, 0.0], requires_grad=True)
    assert torch.equal(from_learned(p, "fp", 1e-6), torch.tensor([0.5, 0.25, 1e-6]))
    assert torch.equal(to_learned(torch.tensor([0.5]), "fp"), torch.tensor([0.5]))
