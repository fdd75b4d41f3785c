import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.core import LearnedScale, RunningStatsScale, ScaledQuant, ScaleGranularity, ScalingStats, StatsScale
from groupquant.formats import get_format

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_stats_scale_fp8_per_tensor_against_ml_dtypes():
    x = torch.randn(64, 32) * 10
    fmt = get_format("fp8_e4m3")
    g = ScaleGranularity("tensor")
    out = ScaledQuant(fmt, g, StatsScale(ScalingStats(), fmt, g, "fp"))(x)
    s = np.float32(np.abs(x.numpy()).max() / np.float32(448.0))
    y = np.clip(x.numpy() / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    np.testing.assert_array_equal(out.value.numpy(), y * s)


def test_learned_mx_scale_starts_equal_to_fake_quant():
    fmt = get_format("fp4_e2m1")
    g = ScaleGranularity("group", 1, 32)
    w = torch.randn(8, 100)
    learned = LearnedScale(ScalingStats(), fmt, g, g.scale_shape(w.shape), "power_of_two", "floor")
    out = ScaledQuant(fmt, g, learned)(w)
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(w, fmt, 32, 1))
    assert bool(learned.initialized) and learned.value.shape == (8, 4, 1)


def test_learned_scale_gets_lsq_gradient():
    fmt = get_format("int8")
    g = ScaleGranularity("tensor")
    learned = LearnedScale(ScalingStats(), fmt, g, (), "fp")
    quant = ScaledQuant(fmt, g, learned, ste="clipped")
    x = torch.tensor([0.3, -1.0, 2.0])
    quant(x)  # initialise: scale = 2 / (127/64)
    with torch.no_grad():
        learned.value.fill_(0.01)  # now 2.0 saturates
    out = quant(x)
    out.value.sum().backward()
    y = x / 0.01
    q = torch.round(y * 64).clamp(-127, 127) / 64
    inside = (y.abs() <= 127 / 64)
    expected = torch.where(inside, q - y, q).sum()  # d(q(x/s) s)/ds
    assert torch.allclose(learned.value.grad, expected)


def test_learned_scale_without_shape_is_created_on_first_call_and_loads():
    fmt = get_format("fp8_e4m3")
    g = ScaleGranularity("channel", -1)
    a = LearnedScale(ScalingStats(), fmt, g, None, "fp")
    a(torch.randn(2, 3, 5))
    assert a.value.shape == (1, 1, 5)
    b = LearnedScale(ScalingStats(), fmt, g, None, "fp")
    b.load_state_dict(a.state_dict())
    assert torch.equal(b.value, a.value) and bool(b.initialized)
    with pytest.raises(ValueError, match="built for"):
        a(torch.randn(2, 6))


def test_running_stats_follow_training_and_freeze_in_eval():
    fmt = get_format("int8")
    r = RunningStatsScale(ScalingStats(), fmt, "fp", momentum=0.5)
    max_normal = fmt.max_normal
    assert r(torch.tensor([4.0])).item() == pytest.approx(4.0 / max_normal)  # train: batch stat
    assert r(torch.tensor([2.0])).item() == pytest.approx(2.0 / max_normal)
    assert r.running_stat.item() == pytest.approx(3.0)
    r.eval()
    assert r(torch.tensor([100.0])).item() == pytest.approx(3.0 / max_normal)
    r.train()
    r(torch.tensor([float("nan")]))
    assert r.running_stat.item() == pytest.approx(3.0)


def test_stochastic_rounding_is_unbiased_on_average():
    fmt = get_format("int8")
    g = ScaleGranularity("tensor")
    quant = ScaledQuant(fmt, g, StatsScale(ScalingStats(), fmt, g, "fp"), rounding="stochastic")
    x = torch.full((20000,), 0.3)
    x[0] = 127 / 64  # sets the scale to 1: grid 1/64
    out = quant(x).value[1:]
    assert set(out.unique().tolist()) == {19 / 64, 20 / 64}
    assert out.mean().item() == pytest.approx(0.3, abs=2e-3)


def test_bad_rounding():
    fmt = get_format("int8")
    g = ScaleGranularity("tensor")
    with pytest.raises(ValueError, match="rounding must be"):
        ScaledQuant(fmt, g, StatsScale(ScalingStats(), fmt, g), rounding="up")
