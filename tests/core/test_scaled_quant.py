import dataclasses

import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.core import (LearnedScale, QuantSpec, RunningStatsScale, ScaledQuant, StatsScale,
                             build_tensor_quant)
from groupquant.formats import get_format
from groupquant.inject import ConfigError
from groupquant.ops import FakeQuantResult
from groupquant.quantizers import Int8WeightPerTensor

ml_dtypes = pytest.importorskip("ml_dtypes")


def _spec(fmt, granularity="tensor", **kwargs):
    return QuantSpec("test", get_format(fmt), granularity=granularity, **kwargs)


def test_stats_scale_fp8_per_tensor_against_ml_dtypes():
    x = torch.randn(64, 32) * 10
    spec = _spec("fp8_e4m3", restrict="fp")
    out = ScaledQuant(spec, StatsScale(spec))(x)
    assert isinstance(out, FakeQuantResult) and out.layout is None
    s = np.float32(np.abs(x.numpy()).max() / np.float32(448.0))
    y = np.clip(x.numpy() / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(out.value.numpy(), y * s)


def test_learned_mx_scale_starts_equal_to_fake_quant():
    spec = _spec("fp4_e2m1", "group", group_size=32, group_dim=1, scale_source="learned")
    w = torch.randn(8, 100)
    learned = LearnedScale(spec, spec.scale_granularity.scale_shape(w.shape))
    out = ScaledQuant(spec, learned)(w)
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(w, "fp4_e2m1", 32, 1))
    assert torch.equal(out.expanded_value, gq.fake_quant(w, "fp4_e2m1", 32, 1))
    assert bool(learned.initialized) and learned.learned_scale.shape == (8, 4, 1)
    # build_tensor_quant sizes the learned scale from the tensor's shape and builds the same thing
    built = build_tensor_quant(spec, w.shape)
    assert isinstance(built, ScaledQuant) and isinstance(built.scale_impl, LearnedScale)
    assert built.scale_impl.learned_scale.shape == (8, 4, 1)
    assert torch.equal(built(w).value, out.value) and torch.equal(built.scale_impl.learned_scale, learned.learned_scale)


def test_learned_scale_gets_lsq_gradient():
    spec = _spec("int8", restrict="fp", scale_source="learned", ste="clipped")
    learned = LearnedScale(spec, ())
    quant = ScaledQuant(spec, learned)
    x = torch.tensor([0.3, -1.0, 2.0])
    quant(x)  # initialise: scale = 2 / (127/64)
    with torch.no_grad():
        learned.learned_scale.fill_(0.01)  # now 2.0 saturates
    out = quant(x)
    out.value.sum().backward()
    y = x / 0.01
    q = torch.round(y * 64).clamp(-127, 127) / 64
    inside = (y.abs() <= 127 / 64)
    expected = torch.where(inside, q - y, q).sum()  # d(q(x/s) s)/ds
    assert torch.allclose(learned.learned_scale.grad, expected)


def test_learned_scale_without_shape_is_created_on_first_call_and_loads():
    spec = _spec("fp8_e4m3", "channel", channel_dim=-1, restrict="fp", scale_source="learned")
    a = LearnedScale(spec, None)
    a(torch.randn(2, 3, 5))
    assert a.learned_scale.shape == (1, 1, 5)
    b = LearnedScale(spec, None)
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.learned_scale, a.learned_scale) and bool(b.initialized)
    with pytest.raises(ValueError, match="built for"):
        a(torch.randn(2, 6))


@pytest.mark.parametrize("shape_known", [False, True])
def test_state_dicts_with_the_old_parameter_name_load(shape_known):
    """The parameter was called ``value`` before it was renamed ``learned_scale``."""
    spec = _spec("fp4_e2m1", "group", group_size=32, group_dim=1, scale_source="learned")
    w = torch.randn(8, 100)
    src = ScaledQuant(spec, LearnedScale(spec, (8, 4, 1)))
    src(w)
    with torch.no_grad():
        src.scale_impl.learned_scale.add_(1.0)  # trained away from the statistic's exponent
    new = src.state_dict()
    old = {key.replace("scale_impl.learned_scale", "scale_impl.value"): t for key, t in new.items()}
    assert "scale_impl.value" in old and "scale_impl.learned_scale" not in old
    dst = ScaledQuant(spec, LearnedScale(spec, (8, 4, 1) if shape_known else None))
    dst.load_state_dict(old)
    assert torch.equal(dst.scale_impl.learned_scale, src.scale_impl.learned_scale)
    assert bool(dst.scale_impl.initialized)
    assert torch.equal(dst(w).value, src(w).value)  # not re-initialised from w on the first call
    assert not torch.equal(dst(w).expanded_value, gq.fake_quant(w, "fp4_e2m1", 32, 1))
    assert set(dst.state_dict()) == set(new)  # saved again under the new name


def test_running_stats_follow_training_and_freeze_in_eval():
    spec = _spec("int8", restrict="fp", scale_source="running_stats", running_momentum=0.5)
    r = RunningStatsScale(spec)
    max_normal = spec.fmt.max_normal
    assert r(torch.tensor([4.0])).item() == pytest.approx(4.0 / max_normal)  # train: batch stat
    assert r(torch.tensor([2.0])).item() == pytest.approx(2.0 / max_normal)
    assert r.running_stat.item() == pytest.approx(3.0)
    r.eval()
    assert r(torch.tensor([100.0])).item() == pytest.approx(3.0 / max_normal)
    r.train()
    r(torch.tensor([float("nan")]))
    assert r.running_stat.item() == pytest.approx(3.0)


@pytest.mark.parametrize("momentum", [0.0, 1.5, True])
def test_running_stats_bad_momentum(momentum):
    spec = _spec("int8", restrict="fp", scale_source="running_stats", running_momentum=momentum)
    with pytest.raises(ValueError, match="running_momentum"):
        RunningStatsScale(spec)


def test_stochastic_rounding_is_unbiased_on_average():
    spec = _spec("int8", restrict="fp", rounding="stochastic")
    quant = ScaledQuant(spec, StatsScale(spec))
    x = torch.full((20000,), 0.3)
    x[0] = 127 / 64  # sets the scale to 1: grid 1/64
    out = quant(x).value[1:]
    assert set(out.unique().tolist()) == {19 / 64, 20 / 64}
    assert out.mean().item() == pytest.approx(0.3, abs=2e-3)


def test_bad_rounding():
    with pytest.raises(ValueError, match="rounding must be"):
        dataclasses.replace(_spec("int8"), rounding="up")  # the spec refuses it when made
    # a quantizer's rounding setting is checked when it resolves into its spec
    with pytest.raises(ConfigError) as info:
        Int8WeightPerTensor.let(float_to_int_rounding="up").spec
    assert info.value.setting == "float_to_int_rounding"
