"""HessianAccumulator: H is the second moment of what the layer multiplies (after its online input
rotation and its input quantizer), so output_error(W, Q, H) is the layer's own mean squared output
error between weights W and Q."""
import pytest
import torch
from torch import nn

import groupquant as gq
from groupquant.calib.hessian import HessianAccumulator, output_error
from groupquant.calib.layer_rotation import rotate_layer


def _layer(recipe, rotate):
    torch.manual_seed(0)
    layer = gq.quantize_model(nn.Sequential(nn.Linear(64, 16)), recipe=recipe)[0]
    if rotate:
        rotate_layer(layer, 32)
    layer.weight_quant.tensor_quant = None  # the layer multiplies its weight as stored
    return layer


def _outputs(layer, weight, x):
    with torch.no_grad():
        layer.weight.copy_(weight)
        y = layer(x)
    return getattr(y, "value", y)


@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4", "mxfp4_weight_only"])
@pytest.mark.parametrize("rotate", [False, True])
def test_output_error_is_the_layers_mean_squared_output_error(recipe, rotate):
    layer = _layer(recipe, rotate)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 40, 64, generator=gen) * torch.linspace(0.1, 4.0, 64)  # uneven channels
    w = layer.weight.detach().clone()
    q = w + 0.05 * torch.randn(w.shape, generator=gen)
    acc = HessianAccumulator(layer).attach()
    with torch.no_grad():
        layer(x)
    acc.detach()
    expected = (_outputs(layer, w, x).double() - _outputs(layer, q, x).double()).pow(2).mean().item()
    assert acc.tokens == 120
    assert output_error(w, q, acc.hessian()) == pytest.approx(expected, rel=1e-5)
