import pytest
import torch
from torch import nn

import groupquant as gq
from groupquant.nn.functional.functional_mode import functional_quantizers
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Act


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Sequential(nn.Linear(8 * 4 * 4, 32), nn.ReLU()),
                         nn.Linear(32, 10))


def test_replaces_layers_and_keeps_the_parameters():
    model = _model()
    params = [model[0].weight, model[2][0].weight, model[3].bias]
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        conv_in = gq.fake_quant(x, "fp8_e4m3", 32, 1)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act, exclude="3")
    assert isinstance(model[0], QuantConv2d) and isinstance(model[2][0], QuantLinear)
    assert type(model[3]) is nn.Linear
    assert model[0].weight is params[0] and model[2][0].weight is params[1] and model[3].bias is params[2]
    first = torch.nn.functional.conv2d(conv_in, gq.fake_quant(params[0], "fp4_e2m1", 32, 1), model[0].bias)
    assert torch.equal(model[0](x), first)


def test_include_and_keywords():
    model = gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, include=["2.*"], weight_group_size=16)
    assert isinstance(model[2][0], QuantLinear) and model[2][0].weight_quant.quantizer.group_size == 16
    assert type(model[0]) is nn.Conv2d and type(model[3]) is nn.Linear


def test_pattern_typo_and_keyword_typo_fail():
    with pytest.raises(ValueError, match="include pattern 'encoder' matches no"):
        gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, include="encoder")
    with pytest.raises(ValueError, match="did you mean 'weight_group_size'"):
        gq.quantize_model(_model(), weight_quant=MXFloat4e2m1Weight, weight_groupsize=16)


def test_a_bare_layer_is_returned_converted():
    layer = nn.Linear(4, 2)
    new = gq.quantize_model(layer, weight_quant=MXFloat4e2m1Weight)
    assert isinstance(new, QuantLinear) and new.weight is layer.weight


def test_attention_out_proj_is_left_alone():
    mha = nn.MultiheadAttention(8, 2)
    gq.quantize_model(mha, weight_quant=MXFloat4e2m1Weight)
    assert not isinstance(mha.out_proj, QuantLinear)


class _TwoSlots(nn.Module):
    """One Linear registered under two names, called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(40, 40)
        self.b = self.a

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def _fq_linear(x, layer):
    return torch.nn.functional.linear(gq.fake_quant(x, "fp8_e4m3", 32, -1),
                                      gq.fake_quant(layer.weight, "fp4_e2m1", 32, -1), layer.bias)


def _spanning(*shape):
    """Normal data scaled over several binades (2**-6 .. 2**6) along the last dim."""
    return torch.randn(*shape) * 2.0 ** torch.randint(-6, 7, shape[-1:]).float()


def test_a_layer_registered_twice_stays_shared_and_is_quantized():
    torch.manual_seed(1)
    model = _TwoSlots()
    lin = model.a
    x = _spanning(3, 40)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, input_quant=MXFloat8e4m3Act)
    assert isinstance(model.a, QuantLinear) and model.a is model.b
    assert model.a.weight is lin.weight
    assert dict(model.named_parameters()).keys() == {"a.weight", "a.bias"}  # still one set of parameters
    expected = _fq_linear(torch.relu(_fq_linear(x, lin)), lin)
    assert torch.equal(model(x), expected)


def test_a_sequential_repeating_a_layer_stays_shared():
    lin = nn.Linear(8, 8)
    model = nn.Sequential(lin, nn.ReLU(), lin)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight)
    assert isinstance(model[0], QuantLinear) and model[0] is model[2]
    # patterns see every name: the second slot alone is a valid pattern, and selects the shared layer
    model = nn.Sequential(lin, nn.ReLU(), lin)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, include=["0", "2"])
    assert isinstance(model[2], QuantLinear) and model[0] is model[2]


@pytest.mark.parametrize("selection", [dict(include="2"), dict(exclude="0"),
                                       dict(filter_fn=lambda name, m: name != "2")])
def test_a_shared_layer_whose_names_disagree_is_refused_before_any_change(selection):
    lin, other = nn.Linear(8, 8), nn.Linear(8, 8)
    model = nn.Sequential(lin, nn.ReLU(), lin, other)
    with pytest.raises(ValueError, match=r"registered under several names \(0, 2\).*select all of its names"):
        gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, **selection)
    assert model[0] is lin and model[2] is lin and model[3] is other  # nothing replaced


def test_a_shared_layer_excluded_by_all_its_names_stays_float():
    lin, other = nn.Linear(8, 8), nn.Linear(8, 8)
    model = nn.Sequential(lin, nn.ReLU(), lin, other)
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, exclude=["0", "2"])
    assert model[0] is lin and model[2] is lin and isinstance(model[3], QuantLinear)


def test_no_quantizer_and_no_recipe_is_refused():
    model = _model()
    with pytest.raises(ValueError, match="needs a recipe .* or at least one quantizer"):
        gq.quantize_model(model)
    assert type(model[3]) is nn.Linear  # nothing changed


def test_a_second_recipe_is_refused_naming_both():
    model = _model()
    gq.quantize_model(model, recipe="mxfp8")
    layer = model[3]
    with pytest.raises(ValueError, match="already quantized with recipe 'mxfp8'.*'nvfp4'.*float model"):
        gq.quantize_model(model, recipe="nvfp4")
    assert model[3] is layer and functional_quantizers(model).recipe.name == "mxfp8"  # left as it was
    gq.quantize_model(model, recipe="mxfp8")  # the same recipe again changes nothing


def test_quantizers_after_a_recipe_convert_only_the_layers_left_float():
    model = _model()
    gq.quantize_model(model, recipe="mxfp8", exclude="3")
    gq.quantize_model(model, weight_quant=MXFloat4e2m1Weight, include="3")
    assert model[3].weight_quant.quantizer is MXFloat4e2m1Weight
    assert model[2][0].weight_quant.quantizer.__name__ == "MXFloat8e4m3Weight"


def test_quantize_model_says_when_it_converts_nothing() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=16)
    model = transformers.GPT2LMHeadModel(cfg)
    with pytest.warns(UserWarning, match=r"converted no layer of GPT2LMHeadModel: .* selected none of its 1 "
                                         r"Linear / Conv layers; its other weight layers \(Conv1D x 4\)"):
        gq.quantize_model(model, recipe="mxfp4", quantize_head=False)
    with pytest.warns(UserWarning, match="converted no layer of Sequential: it has no nn.Linear"):
        gq.quantize_model(torch.nn.Sequential(torch.nn.ReLU()), recipe="mxfp4")
