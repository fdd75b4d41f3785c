"""The functional mode's quantizers are a submodule of the model: they follow train() / eval(),
their state (running statistics) is in state_dict and loads back; F.linear with a 1-D weight."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import Recipe
from groupquant.quantizers import Int8ActPerTensor, MXFloat8e4m3Weight

#: Running abs-max statistics on the functional GEMMs' inputs (frozen in eval).
STATS = Recipe("stats", weight_quant=MXFloat8e4m3Weight, input_quant=Int8ActPerTensor)


class Functional(nn.Module):
    """A functional product and a functional linear, as attention code writes them."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32, generator=torch.Generator().manual_seed(0)) / 6)

    def forward(self, a, b):
        return F.linear(a @ b, self.w)


def _batch(seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 8, 24, generator=g) * scale, torch.randn(4, 24, 32, generator=g) * scale


def _running(model):
    return {k: v.clone() for k, v in model.state_dict().items() if k.endswith("running_stat")}


def test_running_statistics_update_in_training_only_and_are_in_the_state_dict():
    model = Functional()
    gq.quantize_model(model, recipe=STATS)
    model(*_batch(1))  # training: sets the running statistics
    stats = _running(model)
    # a, b of the product and the functional linear's input: each quantizer's running abs-max
    assert {"groupquant_functional.matmul.a_quant.tensor_quant.scale_impl.running_stat",
            "groupquant_functional.matmul.b_quant.tensor_quant.scale_impl.running_stat",
            "groupquant_functional.linears.out16_in32.input_quant.tensor_quant.scale_impl.running_stat"} <= set(stats)
    a, b = _batch(1)
    assert stats["groupquant_functional.matmul.a_quant.tensor_quant.scale_impl.running_stat"] == a.abs().max()
    model.eval()
    model(*_batch(2, scale=10.0))  # eval: statistics frozen
    assert all(torch.equal(v, stats[k]) for k, v in _running(model).items())
    model.train()
    model(*_batch(2, scale=10.0))
    assert not torch.equal(_running(model)["groupquant_functional.matmul.a_quant.tensor_quant.scale_impl.running_stat"],
                           stats["groupquant_functional.matmul.a_quant.tensor_quant.scale_impl.running_stat"])


def test_state_dict_round_trip_gives_the_same_eval_outputs():
    trained = Functional()
    gq.quantize_model(trained, recipe=STATS)
    for seed in (3, 4, 5):
        trained(*_batch(seed))
    trained.eval()
    fresh = Functional()
    gq.quantize_model(fresh, recipe=STATS)
    fresh.load_state_dict(trained.state_dict())  # strict: the functional linear's state is made and loaded
    fresh.eval()
    x = _batch(6, scale=3.0)
    assert torch.equal(fresh(*x), trained(*x))
    # eval uses the running statistic, not the batch's: a differently scaled batch gives another result
    # than its own statistics would
    gq.nn.remove_functional(fresh)
    gq.quantize_model(fresh, recipe=STATS)
    fresh.eval()
    assert not torch.equal(fresh(*x), trained(*x))


class Dot(nn.Module):
    def __init__(self, bias):
        super().__init__()
        g = torch.Generator().manual_seed(7)
        self.w = nn.Parameter(torch.randn(48, generator=g))
        self.b = nn.Parameter(torch.randn((), generator=g)) if bias else None

    def forward(self, x):
        return F.linear(x, self.w, self.b)


@pytest.mark.parametrize("bias", [False, True])
def test_linear_with_a_1d_weight_is_quantized_like_its_2d_form(bias):
    model = Dot(bias)
    x = torch.randn(3, 5, 48, generator=torch.Generator().manual_seed(8))
    torch_out = F.linear(x, model.w, model.b)
    gq.quantize_model(model, recipe="mxfp8")
    out = model(x)
    fq = lambda t, dim: gq.fake_quant(t, "fp8_e4m3", 32, dim)  # noqa: E731
    expected = F.linear(fq(x, -1), fq(model.w.detach()[None], 1), None if model.b is None else model.b.reshape(1))
    assert out.shape == torch_out.shape
    assert torch.equal(out, expected.squeeze(-1))


class Gram(nn.Module):
    def forward(self, x):
        return x @ x.transpose(-2, -1)


def test_a_sequential_keeps_running_only_its_layers_and_saves_the_functional_state():
    def build():
        torch.manual_seed(9)
        return nn.Sequential(nn.Linear(32, 32), Gram())

    x = torch.randn(4, 8, 32, generator=torch.Generator().manual_seed(10))
    trained = build()
    gq.quantize_model(trained, recipe=STATS)
    trained(x)  # the Sequential runs its two children only (the quantizers are not one of them)
    assert len(trained) == 2
    fresh = build()
    gq.quantize_model(fresh, recipe=STATS)
    fresh.load_state_dict(trained.state_dict())
    trained.eval(), fresh.eval()
    y = x * 4
    assert torch.equal(fresh(y), trained(y))
    with pytest.raises(RuntimeError, match="Missing key.*groupquant_functional.matmul.a_quant"):
        fresh.load_state_dict(build().state_dict())  # a float checkpoint lacks the running statistics


def test_a_functional_linear_weight_is_quantized_once_in_eval():
    from groupquant.nn.functional.functional_mode import functional_quantizers

    model = Functional()
    gq.quantize_model(model, recipe="mxfp8")
    a, b = _batch(11)
    first = model(a, b)
    layer = functional_quantizers(model).linears["out16_in32"]
    calls = []
    layer.weight_quant.tensor_quant.register_forward_hook(lambda *args: calls.append(1))
    model.eval()
    with torch.no_grad():
        outs = [model(a, b) for _ in range(3)]
    assert len(calls) == 1  # the eval cache of the weight quantizer, as a converted layer's
    assert all(torch.equal(o, first) for o in outs)
    model.train()
    model(a, b)
    assert len(calls) == 2  # training quantizes per call


def test_linear_with_a_weight_of_another_rank_is_refused_by_name():
    class Bad(nn.Module):
        def forward(self, x):
            return F.linear(x, torch.ones(2, 3, 48))

    model = Bad()
    gq.quantize_model(model, recipe="mxfp8")
    with pytest.raises(ValueError, match=r"F.linear under quantize_model\(recipe='mxfp8'\): the weight must be "
                                         r"\[out, in\] or \[in\], got \(2, 3, 48\)"):
        model(torch.randn(4, 48))


def test_functional_conv_blocks_across_groups_quantizes_whole_backward_operands():
    """A grouped FunctionalConv whose blocks (8) cross its groups (6 output channels each): by default
    its backward stays straight through with a warning; ``blocks_across_groups=True`` quantizes dY
    along dim 1 and W along dim 0 whole (microxcaling's convolution), against fake_quant compositions."""
    from groupquant.nn.functional.functional_quantizers import FunctionalConv
    from groupquant.quantizers import MXFloat8e4m3Act
    wq, aq = MXFloat8e4m3Weight.let(group_size=8), MXFloat8e4m3Act.let(group_size=8)
    r = Recipe("cross", weight_quant=wq, input_quant=aq, grad_output_quant=aq, weight_quant_for_grad_input=wq,
               grad_output_quant_for_grad_weight=aq, input_quant_for_grad_weight=aq, quantize_backprop=True)
    with pytest.raises(gq.inject.ConfigError, match="inside each group's 6"):
        FunctionalConv((24, 4, 3, 3), False, r, groups=4)
    layer = FunctionalConv((24, 4, 3, 3), False, r, groups=4, blocks_across_groups=True)
    torch.manual_seed(0)
    x = (torch.randn(2, 16, 5, 5) * 3).requires_grad_()
    w, g = torch.randn(24, 4, 3, 3).requires_grad_(), torch.randn(2, 24, 5, 5)
    layer(x, w, None, (1, 1), (1, 1), (1, 1)).backward(g)

    def q(t, dim):
        return gq.fake_quant(t, "fp8_e4m3", 8, dim=dim)

    dx = torch.nn.grad.conv2d_input(x.shape, q(w.detach(), 0), q(g, 1), padding=1, groups=4)
    dw = torch.nn.grad.conv2d_weight(q(x.detach(), 0), w.shape, q(g, 0), padding=1, groups=4)
    assert torch.equal(x.grad, dx) and torch.equal(w.grad, dw)
