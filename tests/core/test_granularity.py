import pytest
import torch

from groupquant.core import ScaleGranularity


def test_scale_shapes_per_kind():
    shape = (6, 70, 3)
    assert ScaleGranularity("tensor").scale_shape(shape) == ()
    assert ScaleGranularity("channel", 0).scale_shape(shape) == (6, 1, 1)
    assert ScaleGranularity("channel", -1).scale_shape(shape) == (1, 1, 3)
    assert ScaleGranularity("group", 1, 32).scale_shape(shape) == (6, 3, 1, 3)


def test_group_view_round_trips_with_padding():
    g = ScaleGranularity("group", 1, 32)
    x = torch.randn(4, 70)
    v = g.view(x)
    assert v.shape == (4, 3, 32)
    assert torch.equal(v[:, 2, 6:], torch.zeros(4, 26))
    assert torch.equal(g.layout(x.shape).expand(v), x)


def test_reduce_dims():
    assert ScaleGranularity("tensor").reduce_dims(2, (3, 4)) == (0, 1)
    assert ScaleGranularity("channel", 1).reduce_dims(3, (2, 3, 4)) == (0, 2)
    assert ScaleGranularity("group", 0, 8).reduce_dims(3, (16, 4)) == (1,)


@pytest.mark.parametrize("kwargs, match", [
    ({"kind": "row"}, "kind must be one of"),
    ({"kind": "channel"}, "needs an integer dim"),
    ({"kind": "group", "dim": 1}, "positive integer group_size"),
    ({"kind": "group", "dim": 1, "group_size": 0}, "positive integer group_size"),
])
def test_bad_granularity(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ScaleGranularity(**kwargs)


def test_dim_out_of_range_names_the_dim():
    with pytest.raises(ValueError, match="channel_dim=3 is out of range"):
        ScaleGranularity("channel", 3).scale_shape((2, 2))
