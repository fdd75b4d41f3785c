"""Backward quantization, GEMM by GEMM, against an independent composition: fake_quant of each
operand along the stated dim, then the float matmul. Data spans many binades along rows and
columns (a wrong grouping dim or a re-quantized operand changes the bits), reduction dims are
not multiples of the block (padding), inputs are 3-D, layers have a bias."""
import copy

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.inject import ConfigError, UnknownSettingError
from groupquant.nn import DISABLED, RECIPES, QuantConv2d, QuantLinear, recipe
from groupquant.quantizers import (MXFloat4e2m1Act, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act,
                                   quantizer_spec)


def _spread(*shape, seed=0):
    """Gaussian data scaled by 2**(-6 .. 6) along the last dim and 2**(3 .. -3) along the first."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g) * torch.logspace(-6, 6, shape[-1], base=2.0)
    first = torch.logspace(3, -3, shape[0], base=2.0).reshape(-1, *([1] * (len(shape) - 1)))
    return x * first


def _fq(t, quant, dim):
    """fake_quant of ``t`` by the quantizer class ``quant`` along ``dim`` (None: t itself)."""
    if quant is None:
        return t
    spec = quantizer_spec(quant)
    return gq.fake_quant(t, spec.fmt, spec.group_size, dim, spec.rounding, spec.scale_mode,
                         scale_format=spec.scale_format, tensor_scale=spec.tensor_scale)


def _slots(r):
    """The quantizer of each of the six operands of a recipe, defaults resolved."""
    same = gq.nn.SAME
    go = r.grad_output_quant
    pick = lambda given, default: default if given is same else (None if given is DISABLED else given)  # noqa: E731
    backward = r.quantize_backprop if r.quantize_backprop is not None else go is not None
    return dict(x=r.input_quant, w=r.weight_quant, backward=backward, go=go,
                w_gi=pick(r.weight_quant_for_grad_input, r.weight_quant),
                go_gw=pick(r.grad_output_quant_for_grad_weight, go),
                x_gw=pick(r.input_quant_for_grad_weight, r.input_quant))


def _composition(x, w, b, dy, s):
    """y, dX, dW, db by the composition (backward STE in float when backward quantization is off)."""
    xq, wq = _fq(x, s["x"], -1), _fq(w, s["w"], 1)
    y = F.linear(xq, wq, b)
    dy2 = dy.reshape(-1, dy.shape[-1])
    if s["backward"]:
        dx = (_fq(dy2, s["go"], 1).mm(_fq(w, s["w_gi"], 0))).reshape(x.shape)
        dw = _fq(dy2, s["go_gw"], 0).t().mm(_fq(x.reshape(-1, x.shape[-1]), s["x_gw"], 0))
    else:
        dx = dy2.mm(wq).reshape(x.shape)
        dw = dy2.t().mm(xq.reshape(-1, x.shape[-1]))
    return y, dx, dw, dy2.sum(0)


def _run(layer, x, dy):
    xi = x.clone().requires_grad_(True)
    y = layer(xi)
    y.backward(dy)
    return y.detach(), xi.grad, layer.weight.grad, layer.bias.grad


@pytest.mark.parametrize("name", sorted(RECIPES))
def test_every_recipe_equals_the_composition(name):
    r = recipe(name)
    layer = QuantLinear(80, 72, **r.layer_kwargs())
    with torch.no_grad():
        layer.weight.copy_(_spread(72, 80, seed=1))
    x, dy = _spread(3, 5, 80, seed=2), _spread(3, 5, 72, seed=3)
    got = _run(layer, x, dy)
    expected = _composition(x, layer.weight.detach(), layer.bias.detach(), dy, _slots(r))
    for g, e, what in zip(got, expected, ("y", "dX", "dW", "db")):
        assert torch.equal(g, e), f"{name}: {what}"


def test_a_wrong_grouping_dim_would_show():
    """The composition with dY grouped along the other dim differs: the data makes dims visible."""
    r = recipe("mxfp8_e4m3_e5m2")
    layer = QuantLinear(80, 72, **r.layer_kwargs())
    with torch.no_grad():
        layer.weight.copy_(_spread(72, 80, seed=1))
    x, dy = _spread(3, 5, 80, seed=2), _spread(3, 5, 72, seed=3)
    got = _run(layer, x, dy)
    w = layer.weight.detach()
    dy2 = dy.reshape(-1, 72)
    wrong = (_fq(dy2, MXFloat8e5m2Act, 0).mm(_fq(w, MXFloat8e4m3Weight, 0))).reshape(x.shape)
    assert not torch.equal(got[1], wrong)
    forward_weight = _fq(dy2, MXFloat8e5m2Act, 1).mm(_fq(w, MXFloat8e4m3Weight, 1))  # Wq of the forward pass
    assert not torch.equal(got[1], forward_weight.reshape(x.shape))


def test_disabled_keeps_one_operand_in_high_precision_and_keywords_reach_each_slot():
    layer = QuantLinear(80, 72, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        grad_output_quant=MXFloat8e5m2Act, weight_quant_for_grad_input=DISABLED,
                        grad_output_for_grad_weight_group_size=16, input_for_grad_weight_scale_rounding="even")
    x, dy = _spread(3, 5, 80, seed=4), _spread(3, 5, 72, seed=5)
    got = _run(layer, x, dy)
    w, dy2, x2 = layer.weight.detach(), dy.reshape(-1, 72), x.reshape(-1, 80)
    assert torch.equal(got[1], _fq(dy2, MXFloat8e5m2Act, 1).mm(w).reshape(x.shape))
    go16 = gq.fake_quant(dy2, "fp8_e5m2", 16, 0)
    x_even = gq.fake_quant(x2, "fp8_e4m3", 32, 0, scale_mode="even")
    assert torch.equal(got[2], go16.t().mm(x_even))
    assert layer.weight_quant_for_grad_input is None
    assert layer.grad_output_quant_for_grad_weight.quantizer.__name__ == "MXFloat8e5m2Act[group_size=16]"


def test_quantize_backprop_false_is_the_straight_through_path():
    r = recipe("mxfp8")
    layer = QuantLinear(80, 72, **r.layer_kwargs(), quantize_backprop=False)
    plain = QuantLinear(80, 72, weight_quant=r.weight_quant, input_quant=r.input_quant)
    plain.load_state_dict(layer.state_dict())
    x, dy = _spread(4, 80, seed=6), _spread(4, 72, seed=7)
    for a, b in zip(_run(layer, x, dy), _run(plain, x, dy)):
        assert torch.equal(a, b)


def test_convolution_gemms_follow_the_im2col_rule():
    layer = QuantConv2d(40, 36, 3, padding=1, **recipe("mxfp8_e4m3_e5m2").layer_kwargs())
    x, dy = _spread(6, 40, 5, 4, seed=8).contiguous(), _spread(6, 36, 5, 4, seed=9).contiguous()
    got = _run(layer, x, dy)
    w = layer.weight.detach()
    xq, wq = _fq(x, MXFloat8e4m3Act, 1), _fq(w, MXFloat8e4m3Weight, 1)
    assert torch.equal(got[0], F.conv2d(xq, wq, layer.bias.detach(), padding=1))
    gi = torch.ops.aten.convolution_backward(_fq(dy, MXFloat8e5m2Act, 1), x, _fq(w, MXFloat8e4m3Weight, 0), None,
                                             [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, False, False])[0]
    gw = torch.ops.aten.convolution_backward(_fq(dy, MXFloat8e5m2Act, 0), _fq(x, MXFloat8e4m3Act, 0), w, None,
                                             [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [False, True, False])[1]
    assert torch.equal(got[1], gi) and torch.equal(got[2], gw)
    assert torch.equal(got[3], dy.sum(dim=(0, 2, 3)))


def test_stochastic_rounding_in_a_gradient_slot_is_unbiased_and_reproducible():
    # rceil scales never saturate (with the OCP floor rule a block maximum past max normal is
    # clamped, deterministically: that bias is the format's, not the rounding's)
    stochastic = MXFloat8e5m2Act.let(float_to_int_rounding="stochastic", scale_rounding="rceil")
    layer = QuantLinear(64, 32, bias=False, grad_output_quant=stochastic)  # only dY is quantized
    x = torch.eye(64)[:8] * 1.0
    dy = _spread(8, 32, seed=10)
    torch.manual_seed(0)
    grads = []
    for _ in range(400):
        layer.zero_grad()
        xi = x.clone().requires_grad_(True)
        layer(xi).backward(dy)
        grads.append(xi.grad.clone())
    exact = dy.double().mm(layer.weight.detach().double())
    draws = torch.stack(grads).double()
    assert not torch.equal(draws[0], draws[1])  # draws differ
    mean, stderr = draws.mean(0), draws.std(0) / len(grads) ** 0.5
    z = (mean - exact).abs() / stderr.clamp_min(1e-30)
    assert z.max() < 5.0  # unbiased: within 5 standard errors everywhere (512 elements)
    nearest = gq.fake_quant(dy, "fp8_e5m2", 32, 1, scale_mode="rceil").double().mm(layer.weight.detach().double())
    assert ((nearest - exact).abs() / stderr.clamp_min(1e-30)).max() > 5.0  # round-to-nearest would be biased
    torch.manual_seed(0)
    layer.zero_grad()
    xi = x.clone().requires_grad_(True)
    layer(xi).backward(dy)
    assert torch.equal(xi.grad, grads[0])  # same seed, same draw


def test_bad_slots_name_the_setting():
    with pytest.raises(UnknownSettingError, match="did you mean 'mxfp8'"):
        recipe("mxfp9")
    with pytest.raises(UnknownSettingError, match="grad_output_quant"):
        recipe("mxfp8").replace(grad_ouput_quant=MXFloat8e5m2Act)
    with pytest.raises(ConfigError) as info:
        QuantLinear(64, 32, grad_output_quant=MXFloat8e5m2Act.let(group_dim=0))
    assert info.value.setting == "grad_output_group_dim"
    with pytest.raises(ConfigError) as info:
        QuantLinear(64, 32, grad_output_quant=MXFloat8e5m2Act.let(scaling_source="learned"))
    assert info.value.setting == "grad_output_scaling_source"
    with pytest.raises(UnknownSettingError, match="runs no GEMM"):
        gq.nn.QuantReLU(grad_output_quant=MXFloat8e5m2Act)
    with pytest.raises(TypeError, match="grad_output_quant must be a quantizer class"):
        QuantLinear(64, 32, grad_output_quant="mxfp8")
    with pytest.raises(ConfigError, match="quantize_backprop=False"):
        QuantLinear(64, 32, grad_output_quant=MXFloat8e5m2Act, grad_output_group_size=16, quantize_backprop=False)


def test_quantize_model_with_a_recipe_and_overrides():
    model = torch.nn.Sequential(torch.nn.Linear(80, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    gq.quantize_model(model, recipe="mxfp4_fwd_mxfp8_bwd", exclude=["2"])
    assert isinstance(model[0], QuantLinear) and type(model[2]) is torch.nn.Linear
    assert model[0].weight_quant.quantizer.__name__ == "MXFloat4e2m1Weight"
    assert model[0].weight_quant_for_grad_input.quantizer.__name__ == "MXFloat8e4m3Weight"
    other = torch.nn.Sequential(torch.nn.Linear(80, 64))
    gq.quantize_model(other, recipe=recipe("mxfp8").replace(grad_output_quant=MXFloat4e2m1Act))
    assert other[0].grad_output_quant_for_grad_weight.quantizer.__name__ == "MXFloat4e2m1Act"


def test_compiled_layer_equals_eager():
    layer = QuantLinear(80, 72, **recipe("mxfp8_e4m3_e5m2").layer_kwargs())
    x, dy = _spread(3, 5, 80, seed=11), _spread(3, 5, 72, seed=12)
    eager = _run(copy.deepcopy(layer), x, dy)
    compiled_layer = copy.deepcopy(layer)
    compiled = torch.compile(compiled_layer)
    xi = x.clone().requires_grad_(True)
    y = compiled(xi)
    y.backward(dy)
    got = (y.detach(), xi.grad, compiled_layer.weight.grad, compiled_layer.bias.grad)
    for a, b in zip(eager[:3], got[:3]):
        assert torch.equal(a, b)
    torch.testing.assert_close(got[3], eager[3], rtol=1e-6, atol=0)  # the bias sum: Inductor may order it otherwise


def test_grouped_convolutions_keep_a_straight_through_backward_with_a_warning():
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, groups=32), torch.nn.Conv2d(32, 16, 1))
    with pytest.warns(UserWarning, match="groups=32"):
        gq.quantize_model(model, recipe="mxfp8")
    assert model[0].quantize_backprop is False and model[1].quantize_backprop is True
    model(torch.randn(2, 32, 6, 6)).sum().backward()
    with pytest.raises(ConfigError) as info:
        QuantConv2d(32, 32, 3, groups=32, grad_output_quant=MXFloat8e5m2Act, quantize_backprop=True)
    assert info.value.setting == "quantize_backprop"


@pytest.mark.parametrize("groups", [2, 4])
def test_grouped_convolution_whose_blocks_fit_each_group_quantizes_its_backward(groups):
    """out_channels / groups a multiple of the block: every backward block lies inside one group's
    reduction, so each backward operand is its groups quantized one by one (fake_quant of each
    group's slice), then torch's grouped convolution gradients."""
    wq, aq, gq8 = MXFloat8e4m3Weight.let(group_size=8), MXFloat8e4m3Act.let(group_size=8), MXFloat8e5m2Act.let(
        group_size=8)
    layer = QuantConv2d(8, 16 * groups, 3, padding=1, groups=groups, bias=False, weight_quant=wq, input_quant=aq,
                        grad_output_quant=gq8, grad_output_quant_for_grad_weight=gq8, weight_quant_for_grad_input=wq,
                        input_quant_for_grad_weight=aq, quantize_backprop=True)
    assert layer.quantize_backprop is True
    x = _spread(2, 8, 5, 5, seed=21).requires_grad_()
    dy = _spread(2, 16 * groups, 5, 5, seed=22)
    layer(x).backward(dy)
    w, xd = layer.weight.detach(), x.detach()

    def per_group(t, quant, dim):  # each group's channels (dim 1 of x / dY, dim 0 of W) quantized on their own
        channel_dim = 0 if t is w else 1
        return torch.cat([_fq(part, quant, dim) for part in t.chunk(groups, channel_dim)], channel_dim)

    want_dx = torch.nn.grad.conv2d_input(xd.shape, per_group(w, wq, 0), per_group(dy, gq8, 1), padding=1,
                                         groups=groups)
    want_dw = torch.nn.grad.conv2d_weight(per_group(xd, aq, 0), w.shape, per_group(dy, gq8, 0), padding=1,
                                          groups=groups)
    assert torch.equal(x.grad, want_dx) and torch.equal(layer.weight.grad, want_dw)


def test_grouped_convolution_whose_blocks_cross_groups_names_the_slot():
    with pytest.raises(ConfigError, match="grad_output_quant's groups of 32 inside each group's 16"):
        QuantConv2d(32, 32, 3, groups=2, grad_output_quant=MXFloat8e5m2Act, quantize_backprop=True)
