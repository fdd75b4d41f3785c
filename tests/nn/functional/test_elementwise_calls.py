"""Element-wise torch calls under a recipe's element-wise precision (functional mode): torch's own
argument rules (in place, positional dtype) kept, values from groupquant.elementwise."""
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant import elementwise as ew
from groupquant.nn import recipe

BF16 = recipe("mxfp8").replace(elementwise="bfloat16")


class Call(nn.Module):
    """Runs ``fn(x)`` inside the model's forward (where the function mode is on)."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _x(seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(4, 40, generator=g) * 3


@pytest.mark.parametrize("call", [lambda x: F.relu(x, inplace=True), lambda x: F.relu(x, True),
                                  lambda x: torch.relu_(x), lambda x: x.relu_()])
def test_relu_in_place_writes_the_input(call):
    x = _x()
    expected = ew.relu(x.clone(), precision="bfloat16")
    model = Call(call)
    gq.quantize_model(model, recipe=BF16)
    out = model(x)
    assert out is x  # torch returns its input
    assert torch.equal(x, expected)


@pytest.mark.parametrize("call, op", [(lambda x: F.silu(x, inplace=True), ew.silu), (lambda x: x.sigmoid_(), ew.sigmoid),
                                      (lambda x: torch.tanh_(x), ew.tanh)])
def test_other_in_place_forms(call, op):
    x = _x(1)
    expected = op(x.clone(), precision="bfloat16")
    model = Call(call)
    gq.quantize_model(model, recipe=BF16)
    assert model(x) is x and torch.equal(x, expected)


def test_not_in_place_leaves_the_input():
    x = _x(2)
    before = x.clone()
    model = Call(lambda t: F.relu(t))
    gq.quantize_model(model, recipe=BF16)
    assert torch.equal(model(x), ew.relu(before, precision="bfloat16")) and torch.equal(x, before)


@pytest.mark.parametrize("call", [lambda x: torch.softmax(x, 1, torch.float64), lambda x: x.softmax(1, torch.float64),
                                  lambda x: torch.softmax(x, 1, dtype=torch.float64),
                                  lambda x: F.softmax(x, 1, 3, torch.float64), lambda x: F.softmax(x, 1, dtype=torch.float64)])
def test_softmax_dtype_is_honoured_positional_or_keyword(call):
    x = _x(3)
    model = Call(call)
    gq.quantize_model(model, recipe=BF16)
    out = model(x)
    assert out.dtype == call(x).dtype == torch.float64  # torch's own result dtype
    assert torch.equal(out, ew.softmax(x.to(torch.float64), 1, "bfloat16").to(torch.float64))
