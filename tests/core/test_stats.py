import numpy as np
import pytest
import torch

from groupquant.core import ScaleGranularity, ScalingStats


def test_abs_max_per_kind_against_numpy():
    x = torch.randn(5, 40, 3)
    a = np.abs(x.numpy())
    stats = ScalingStats("abs_max")
    assert stats(x, ScaleGranularity("tensor")).item() == a.max()
    np.testing.assert_array_equal(stats(x, ScaleGranularity("channel", 0)).numpy(), a.max(axis=(1, 2), keepdims=True))
    per_group = stats(x, ScaleGranularity("group", 1, 16))
    assert per_group.shape == (5, 3, 1, 3)
    padded = np.concatenate([a, np.zeros((5, 8, 3), np.float32)], axis=1).reshape(5, 3, 16, 3)
    np.testing.assert_array_equal(per_group.numpy(), padded.max(axis=2, keepdims=True))


def test_abs_max_propagates_nan_and_has_no_gradient():
    x = torch.ones(2, 4, requires_grad=True)
    assert not ScalingStats()(x, ScaleGranularity("tensor")).requires_grad
    y = torch.tensor([[1.0, float("nan")], [2.0, 3.0]])
    out = ScalingStats()(y, ScaleGranularity("channel", 0))
    assert torch.isnan(out[0]).all() and out[1].item() == 3.0


@pytest.mark.parametrize("q", [50.0, 90.0, 99.0, 100.0])
def test_percentile_is_an_order_statistic(q):
    x = torch.randn(1000)
    expected = np.sort(np.abs(x.numpy()))[int(np.ceil(q / 100 * 1000)) - 1]
    assert ScalingStats("percentile", q)(x, ScaleGranularity("tensor")).item() == expected


def test_percentile_per_channel_and_not_per_group():
    x = torch.randn(4, 50)
    out = ScalingStats("percentile", 100.0)(x, ScaleGranularity("channel", 0))
    assert torch.equal(out, x.abs().amax(dim=1, keepdim=True))
    with pytest.raises(ValueError, match="per tensor or per channel"):
        ScalingStats("percentile", 99.0)(x, ScaleGranularity("group", 1, 8))


@pytest.mark.parametrize("kwargs", [{"op": "mean"}, {"op": "percentile", "percentile": 0.0},
                                    {"op": "percentile", "percentile": 101}])
def test_bad_stats(kwargs):
    with pytest.raises(ValueError):
        ScalingStats(**kwargs)
