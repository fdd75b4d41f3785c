"""include= / exclude= / filter_fn= of quantize_model reach the functional mode: a layer left
float stays float on every route, and a converted layer's weight is quantized by the layer only."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn.functional.functional_mode import functional_quantizers


def _fq(t, dim):
    return gq.fake_quant(t, "fp8_e4m3", 32, dim)


class TinyLM(nn.Module):
    """A body layer, a functional attention-like product and an lm_head."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.body = nn.Linear(32, 32)
        self.lm_head = nn.Linear(32, 64, bias=False)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) / 5)

    def forward(self, x):
        h = torch.relu(self.body(x))
        h = torch.matmul(h, h.transpose(-2, -1)) @ h / 32
        return self.lm_head(h)


def _x():
    return torch.randn(2, 40, 32, generator=torch.Generator().manual_seed(1)) * torch.logspace(-2, 2, 32, base=2.0)


def _expected(model, x):
    """Body and product quantized (MXFP8 E4M3), lm_head in float: the composition."""
    h = torch.relu(F.linear(_fq(x, -1), _fq(model.body.weight, 1), model.body.bias))
    ht = h.transpose(-2, -1)
    s = torch.matmul(_fq(h, -1), _fq(ht, -2))
    h = torch.matmul(_fq(s, -1), _fq(h, -2)) / 32
    return F.linear(h, model.lm_head.weight)


@pytest.mark.parametrize("selection", [{"exclude": "lm_head"}, {"include": ["body"]},
                                       {"filter_fn": lambda name, m: name != "lm_head"}])
def test_a_layer_left_float_stays_float_on_the_functional_route(selection):
    model = TinyLM()
    gq.quantize_model(model, recipe="mxfp8", **selection)
    assert type(model.lm_head) is nn.Linear
    x = _x()
    with torch.no_grad():
        assert torch.equal(model(x), _expected(model, x))
    assert len(functional_quantizers(model).linears) == 0  # no F.linear went through the mode


def test_excluded_layer_stays_float_in_training_and_backward():
    model = TinyLM()
    gq.quantize_model(model, recipe="mxfp8", exclude="lm_head")
    x = _x().requires_grad_(True)
    model(x).sum().backward()
    h = model.lm_head.weight.grad  # dW of a float head: sum over tokens of its (quantized-body) input
    assert torch.isfinite(h).all() and len(functional_quantizers(model).linears) == 0


def test_converted_layers_are_not_quantized_again_under_torch_compile():
    model = TinyLM()
    gq.quantize_model(model, recipe="mxfp8", exclude="lm_head")
    x = _x()
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, backend="aot_eager")(x)
    assert torch.equal(compiled, eager)
    # the body's F.linear ran inside QuantLinear and the head's inside a float layer: neither in the mode
    assert len(functional_quantizers(model).linears) == 0


def test_removing_the_mode_removes_the_float_hooks():
    model = TinyLM()
    gq.quantize_model(model, recipe="mxfp8", exclude="lm_head")
    assert model.lm_head._forward_pre_hooks
    assert gq.nn.remove_functional(model)
    assert not model.lm_head._forward_pre_hooks and not model.lm_head._forward_hooks
    assert functional_quantizers(model) is None
