import pytest
import torch

import groupquant as gq
from groupquant.core import DynamicQuant, ScaleGranularity
from groupquant.formats import MX_FORMATS, get_format


@pytest.mark.parametrize("name", MX_FORMATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_group_output_is_fake_quant(name, dim):
    x = torch.randn(6, 70, 9) * 3
    out = DynamicQuant(get_format(name), ScaleGranularity("group", dim, 32))(x)
    assert out.value.shape == out.layout.contracted_shape
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(x, name, 32, dim))
    q = gq.quantize(x, name, 32, dim)
    assert torch.equal(out.scale, q.scale)


def _reference_per_row(x2d, fmt, mode):
    """Independent: one fake_quant group per row of a 2-D tensor."""
    return gq.fake_quant(x2d, fmt, None, 1, scale_mode=mode)


@pytest.mark.parametrize("restrict, mode", [("fp", "float"), ("power_of_two", "floor"), ("power_of_two", "rceil")])
def test_channel_and_tensor_granularity(restrict, mode):
    fmt = get_format("fp8_e4m3")
    w = torch.randn(6, 4, 3, 3)
    pc = DynamicQuant(fmt, ScaleGranularity("channel", 0), restrict, mode if restrict != "fp" else "floor")(w)
    assert torch.equal(pc.value, _reference_per_row(w.reshape(6, -1), fmt, mode).reshape(w.shape))
    assert pc.scale.shape == (6, 1, 1, 1)
    a = torch.randn(2, 5, 7)
    pt = DynamicQuant(fmt, ScaleGranularity("channel", 1), restrict, mode if restrict != "fp" else "floor")(a)
    rows = a.movedim(1, 0).reshape(5, -1)
    assert torch.equal(pt.value, _reference_per_row(rows, fmt, mode).reshape(5, 2, 7).movedim(0, 1))
    tt = DynamicQuant(fmt, ScaleGranularity("tensor"), restrict, mode if restrict != "fp" else "floor")(a)
    assert tt.scale.shape == ()
    assert torch.equal(tt.value, _reference_per_row(a.reshape(1, -1), fmt, mode).reshape(a.shape))


def test_per_tensor_int8_float_scale_against_plain_pytorch():
    x = torch.randn(33, 17)
    out = DynamicQuant(get_format("int8"), ScaleGranularity("tensor"), "fp")(x)
    s = x.abs().max() / 127
    assert torch.equal(out.value, torch.round(x / s).clamp(-127, 127) * s)


def test_gradient_is_straight_through():
    x = torch.randn(4, 64, requires_grad=True)
    out = DynamicQuant(get_format("fp4_e2m1"), ScaleGranularity("group", 1, 32))(x)
    out.value.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_bad_arguments():
    with pytest.raises(ValueError, match="ste must be"):
        DynamicQuant(get_format("int8"), ScaleGranularity("tensor"), ste="none")
    with pytest.raises(ValueError, match="restrict must be"):
        DynamicQuant(get_format("int8"), ScaleGranularity("tensor"), restrict="log2")
