"""HessianAccumulator: the second moment of the input the layer multiplies (after its online
rotation and its input quantizer), checked against a direct float64 computation."""
import pytest
import torch
from torch import nn

import groupquant as gq
from groupquant.calib.hessian import HessianAccumulator, output_error
from groupquant.calib.layer_rotation import rotate_layer
from groupquant.calib.rotate import rotate_model
from groupquant.ops.hadamard import fwht


def _hessian(model, layer, x):
    acc = HessianAccumulator(layer).attach()
    with torch.no_grad():
        model(x)
    acc.detach()
    return acc.hessian()


def test_the_hessian_is_taken_in_the_rotated_basis():
    torch.manual_seed(0)
    model = gq.quantize_model(nn.Sequential(nn.Linear(64, 16)), recipe="mxfp4_weight_only", functional=False)
    rotate_model(model)
    layer = model[0]
    assert layer.input_rotation is not None and layer.input_rotation.block_size == 32
    x = torch.randn(8, 64) * torch.logspace(-3, 3, 64)  # features several binades apart
    xr = fwht(x, 32).double()
    torch.testing.assert_close(_hessian(model, layer, x), xr.T @ xr / 8, rtol=1e-12, atol=0)


def test_the_hessian_of_a_w_plus_a_layer_is_of_its_quantized_input_and_predicts_the_output_error():
    torch.manual_seed(1)
    model = gq.quantize_model(nn.Sequential(nn.Linear(64, 16, bias=False)), recipe="mxfp4", functional=False)
    layer = model[0]
    x = torch.randn(8, 64) * torch.logspace(-2, 2, 64)
    qx = gq.fake_quant(x, "fp4_e2m1").double()
    h = _hessian(model, layer, x)
    torch.testing.assert_close(h, qx.T @ qx / 8, rtol=1e-12, atol=0)
    w = layer.weight.detach()
    q = gq.fake_quant(w, "fp4_e2m1")
    direct = ((qx @ (w.double() - q.double()).T) ** 2).mean().item()  # mean squared output change
    assert abs(output_error(w, q, h) - direct) <= 1e-9 * max(direct, 1e-30)


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
