import warnings

import pytest
import torch

import groupquant as gq

from groupquant.core import DynamicQuant, LearnedScale, RunningStatsScale, ScaledQuant, StatsScale
from groupquant.inject import ConfigError
from groupquant.quantizers import (Int8ActPerTensor, Int8WeightPerChannel, Int8WeightPerTensor, LearnedScaling,
                                   MXFloat4e2m1Weight, MXFloat8e4m3Act, ScalingPerOutput, ScalingStatsOp)


@pytest.mark.parametrize("flag, equivalent", [(True, Int8WeightPerChannel), (False, Int8WeightPerTensor)])
def test_deprecated_boolean_warns_and_gives_the_same_result(flag, equivalent):
    w = torch.randn(16, 40)
    quant = Int8WeightPerTensor.let(scaling_per_output_channel=flag)
    with pytest.warns(DeprecationWarning, match="scaling_per_output_channel is deprecated"):
        module = quant.tensor_quant
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expected = equivalent.tensor_quant(w)
    out = module(w)
    assert torch.equal(out.value, expected.value) and torch.equal(out.scale, expected.scale)


def test_no_warning_without_the_deprecated_flag():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Int8WeightPerChannel.tensor_quant


@pytest.mark.parametrize("quant, overrides, setting", [
    (MXFloat4e2m1Weight, {"group_size": None}, "group_size"),
    (MXFloat4e2m1Weight, {"group_size": 0}, "group_size"),
    (MXFloat4e2m1Weight, {"group_size": -32}, "group_size"),
    (MXFloat4e2m1Weight, {"group_size": 32.0}, "group_size"),
    (Int8WeightPerTensor, {"group_size": 64}, "group_size"),
    (Int8WeightPerTensor, {"scaling_per_output": "row"}, "scaling_per_output"),
    (Int8WeightPerTensor, {"scaling_per_output_channel": "yes"}, "scaling_per_output_channel"),
    (Int8ActPerTensor, {"scaling_per_output": ScalingPerOutput.CHANNEL}, "scaling_per_output"),
    (MXFloat4e2m1Weight, {"scaling_stats_op": ScalingStatsOp.PERCENTILE}, "scaling_stats_op"),
    (Int8ActPerTensor, {"scaling_stats_op": "percentile", "percentile": 150}, "percentile"),
    (Int8ActPerTensor, {"running_momentum": 0.0}, "running_momentum"),
    (MXFloat8e4m3Act, {"group_dim": "1"}, "group_dim"),
    (Int8WeightPerChannel, {"channel_dim": 0.5}, "channel_dim"),
    (MXFloat4e2m1Weight, {"scaling_source": "magic"}, "scaling_source"),
    (MXFloat4e2m1Weight, {"float_to_int_rounding": "up"}, "float_to_int_rounding"),
    (MXFloat4e2m1Weight, {"scale_rounding": "down"}, "scale_rounding"),
    (MXFloat4e2m1Weight, {"restrict_scaling_type": "log"}, "restrict_scaling_type"),
    (MXFloat4e2m1Weight, {"ste": "straight"}, "ste"),
    (MXFloat4e2m1Weight, {"scaling_source": "learned", "scaling_min_val": 0}, "scaling_min_val"),
])
def test_scaling_misconfiguration_names_the_setting(quant, overrides, setting):
    with pytest.raises(ConfigError) as info:
        quant.let(**overrides).tensor_quant
    assert info.value.setting == setting


def test_scale_sources_build_the_matching_core_modules():
    assert isinstance(MXFloat4e2m1Weight.tensor_quant, DynamicQuant)
    running = Int8ActPerTensor.tensor_quant
    assert isinstance(running, ScaledQuant) and isinstance(running.scale_impl, RunningStatsScale)
    pct = Int8WeightPerTensor.let(scaling_stats_op="percentile", percentile=99.0).tensor_quant
    assert isinstance(pct.scale_impl, StatsScale) and pct.scale_impl.stats.percentile == 99.0


def test_learned_scaling_mixin_on_an_mx_weight():
    class LearnedMXFP4(LearnedScaling, MXFloat4e2m1Weight):
        pass

    from groupquant.core import build_tensor_quant
    from groupquant.quantizers import quantizer_spec

    module = build_tensor_quant(quantizer_spec(LearnedMXFP4).with_dims(1, 0), (16, 70))
    assert isinstance(module.scale_impl, LearnedScale) and module.spec.ste == "clipped"
    assert module.scale_impl.learned_scale.shape == (16, 3, 1)
    assert module.scale_impl.restrict == "power_of_two"
    assert "learned" in gq.describe(LearnedMXFP4)["scale_rule"]


def test_a_group_dim_the_weight_lacks_names_the_layer_keyword():
    from groupquant.proxy import WeightQuantProxy

    with pytest.raises(ConfigError) as info:
        WeightQuantProxy(MXFloat4e2m1Weight.let(scaling_source="learned"), (4,))
    assert info.value.setting == "weight_group_dim"


def test_each_read_builds_a_new_module():
    assert Int8ActPerTensor.tensor_quant is not Int8ActPerTensor.tensor_quant
