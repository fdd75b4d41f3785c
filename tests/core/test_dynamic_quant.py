import dataclasses
import pickle

import pytest
import torch

import groupquant as gq
from groupquant.core import DynamicQuant, QuantSpec, build_tensor_quant, dynamic_fake_quant
from groupquant.formats import MX_FORMATS, get_format
from groupquant.inject import ConfigError
from groupquant.ops import FakeQuantResult
from groupquant.quantizers import MXFloat4e2m1Weight


def _spec(fmt, granularity="group", **kwargs):
    return QuantSpec("test", fmt, granularity=granularity, **kwargs)


@pytest.mark.parametrize("name", MX_FORMATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_group_output_is_fake_quant(name, dim):
    x = torch.randn(6, 70, 9) * 3
    spec = _spec(get_format(name), group_size=32, group_dim=dim)
    out = DynamicQuant(spec)(x)
    assert isinstance(out, FakeQuantResult)
    assert out.value.shape == out.layout.contracted_shape
    assert torch.equal(out.layout.expand(out.value), gq.fake_quant(x, name, 32, dim))
    assert torch.equal(out.expanded_value, gq.fake_quant(x, name, 32, dim))
    q = gq.quantize(x, name, 32, dim)
    assert torch.equal(out.scale, q.scale)
    # the function behind the module: the same values, contracted or in x's shape
    assert torch.equal(dynamic_fake_quant(x, spec).value, out.value)
    flat = dynamic_fake_quant(x, spec, contract=False)
    assert flat.layout is None and torch.equal(flat.value, out.expanded_value) and torch.equal(flat.scale, q.scale)


def test_standalone_group_dim_is_the_last_dim():
    x = torch.randn(6, 70, 9) * 3
    out = DynamicQuant(_spec(get_format("fp8_e4m3")))(x)  # group_dim None -> last dim
    assert out.layout.dim == 2 and torch.equal(out.expanded_value, gq.fake_quant(x, "fp8_e4m3", 32, -1))


def _reference_per_row(x2d, fmt, mode):
    """Independent: one fake_quant group per row of a 2-D tensor."""
    return gq.fake_quant(x2d, fmt, None, 1, scale_mode=mode)


@pytest.mark.parametrize("restrict, mode", [("fp", "float"), ("power_of_two", "floor"), ("power_of_two", "rceil")])
def test_channel_and_tensor_granularity(restrict, mode):
    fmt = get_format("fp8_e4m3")
    rule = mode if restrict != "fp" else "floor"
    w = torch.randn(6, 4, 3, 3)
    pc_spec = _spec(fmt, "channel", channel_dim=0, restrict=restrict, scale_rounding=rule)
    assert pc_spec.scale_mode == mode
    pc = DynamicQuant(pc_spec)(w)
    assert pc.layout is None
    assert torch.equal(pc.value, _reference_per_row(w.reshape(6, -1), fmt, mode).reshape(w.shape))
    assert pc.scale.shape == (6, 1, 1, 1)
    a = torch.randn(2, 5, 7)
    pt = DynamicQuant(_spec(fmt, "channel", channel_dim=1, restrict=restrict, scale_rounding=rule))(a)
    rows = a.movedim(1, 0).reshape(5, -1)
    assert torch.equal(pt.value, _reference_per_row(rows, fmt, mode).reshape(5, 2, 7).movedim(0, 1))
    tt = DynamicQuant(_spec(fmt, "tensor", restrict=restrict, scale_rounding=rule))(a)
    assert tt.scale.shape == ()
    assert torch.equal(tt.value, _reference_per_row(a.reshape(1, -1), fmt, mode).reshape(a.shape))
    # the scales (taken from the kernel's pass) equal the abs-max rule applied in plain PyTorch
    for out, amax in [(pc, w.abs().amax(dim=(1, 2, 3), keepdim=True)), (pt, a.abs().amax(dim=(0, 2), keepdim=True)),
                      (tt, a.abs().amax())]:
        expected, _ = gq.ops.group_scale(amax, fmt, mode, torch.float32)
        assert torch.equal(out.scale, expected)


def test_standalone_channel_dim_is_dim_0():
    fmt = get_format("fp8_e4m3")
    w = torch.randn(6, 4, 3)
    out = DynamicQuant(_spec(fmt, "channel"))(w)  # channel_dim None -> dim 0
    assert out.scale.shape == (6, 1, 1)
    assert torch.equal(out.value, _reference_per_row(w.reshape(6, -1), fmt, "floor").reshape(w.shape))


def test_nan_group_gets_a_nan_scale_and_pickles_round_trip():
    x = torch.randn(3, 64)
    x[1, 40] = float("nan")
    spec = _spec(get_format("fp8_e4m3"), group_size=32, group_dim=1)
    dq = DynamicQuant(spec)
    scale = dq(x).scale
    assert scale.shape == (3, 2, 1) and torch.isnan(scale).flatten().tolist() == [False] * 3 + [True] + [False] * 2
    # everything that fixes the module is the one frozen, hashable spec: it pickles and compares equal
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.rounding = "floor"
    assert hash(spec) == hash(dataclasses.replace(spec))
    loaded = pickle.loads(pickle.dumps(dq))
    assert loaded.spec == spec and loaded.fmt == spec.fmt
    assert torch.equal(loaded(x).scale.nan_to_num(), scale.nan_to_num())
    assert torch.equal(loaded(x).value.nan_to_num(), dq(x).value.nan_to_num())


def test_build_tensor_quant_picks_dynamic_quant_for_abs_max_stats():
    spec = _spec(get_format("fp4_e2m1"), group_size=32, group_dim=1)
    module = build_tensor_quant(spec)
    assert isinstance(module, DynamicQuant) and module.spec is spec and module.fmt is spec.fmt
    x = torch.randn(4, 70)
    assert torch.equal(module(x).expanded_value, gq.fake_quant(x, "fp4_e2m1", 32, 1))


def test_per_tensor_int8_float_scale_against_plain_pytorch():
    x = torch.randn(33, 17)
    out = DynamicQuant(_spec(get_format("int8"), "tensor", restrict="fp"))(x)
    s = x.abs().max() / 127
    assert torch.equal(out.value, torch.round(x / s).clamp(-127, 127) * s)


def test_gradient_is_straight_through():
    x = torch.randn(4, 64, requires_grad=True)
    out = DynamicQuant(_spec(get_format("fp4_e2m1"), group_size=32, group_dim=1))(x)
    out.value.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_bad_arguments():
    x = torch.randn(4, 64)
    spec = _spec(get_format("int8"), "tensor")
    with pytest.raises(ValueError, match="ste must be"):
        DynamicQuant(dataclasses.replace(spec, ste="none"))(x)
    with pytest.raises(ValueError, match="scale_rounding must be"):
        DynamicQuant(dataclasses.replace(spec, scale_rounding="log2"))(x)
    # the settings are checked where quantizers resolve into a spec, naming the setting at fault
    for setting, bad in [("ste", "none"), ("restrict_scaling_type", "log2"), ("scale_rounding", "bogus")]:
        with pytest.raises(ConfigError) as info:
            MXFloat4e2m1Weight.let(**{setting: bad}).spec
        assert info.value.setting == setting
