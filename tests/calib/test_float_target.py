"""Error correction from the quantized upstream layers, one layer: against float64 references
written from the definitions (least squares of the float output on the quantized inputs)."""
from __future__ import annotations

import torch

from groupquant import fake_quant
from groupquant.calib.float_target import PairedMoments, correct_layer, float_target_weight, target_error
from groupquant.nn import QuantLinear
from groupquant.quantizers import MXFloat4e2m1Weight


def _moments(xq: torch.Tensor, xf: torch.Tensor) -> PairedMoments:
    n = xq.shape[0]
    xq, xf = xq.double(), xf.double()
    return PairedMoments(xq.T @ xq / n, xq.T @ xf / n, xf.T @ xf / n, n)


def _inputs(seed: int = 0, tokens: int = 512, features: int = 64):
    g = torch.Generator().manual_seed(seed)
    xf = torch.randn(tokens, features, generator=g) * torch.linspace(0.2, 3.0, features)
    xq = fake_quant(xf + 0.05 * torch.randn(tokens, features, generator=g), "fp4_e2m1")  # upstream error + MXFP4
    return xq, xf


def test_the_target_is_the_least_squares_fit_of_the_float_output_on_the_quantized_inputs():
    xq, xf = _inputs()
    w = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))
    want = torch.linalg.lstsq(xq.double(), (xf.double() @ w.double().T)).solution.T  # float64 reference
    got = float_target_weight(w, _moments(xq, xf), ridge=0.0)
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)


def test_the_objective_is_the_mean_squared_output_error():
    xq, xf = _inputs(2)
    g = torch.Generator().manual_seed(3)
    w, q = torch.randn(8, 64, generator=g), torch.randn(8, 64, generator=g)
    direct = float(((xf.double() @ w.double().T - xq.double() @ q.double().T) ** 2).sum() / (512 * 8))
    m = _moments(xq, xf)
    assert abs(target_error(q, w, m) - direct) <= 1e-9 * direct
    star = float_target_weight(w, m, ridge=0.0)
    assert target_error(star, w, m) <= target_error(w, w, m)  # the fit beats the float weight itself
    d = (q.double() - star)
    assert abs(target_error(q, w, m) - target_error(star, w, m) - float(((d @ m.qq) * d).sum() / 8)) <= 1e-9 * direct


def test_the_corrected_layer_beats_round_to_nearest_and_is_never_worse():
    xq, xf = _inputs(4)
    torch.manual_seed(5)
    layer = QuantLinear(64, 32, bias=False, weight_quant=MXFloat4e2m1Weight)
    w = layer.weight.detach().clone()
    m = _moments(xq, xf)
    (report,) = correct_layer("layer", layer, w, m)
    rtn = target_error(fake_quant(w, "fp4_e2m1"), w, m)
    assert report.error_before == rtn
    assert report.error_after < 0.9 * rtn  # the upstream error is corrected
    stored = layer.quant_weight().value
    assert torch.equal(fake_quant(layer.weight.detach(), "fp4_e2m1"), stored)  # a fixed point of the quantizer
    assert abs(target_error(stored, w, m) - report.error_after) <= 1e-9 * rtn
    (again,) = correct_layer("layer", layer, w, m)  # run again: it keeps what it has unless better
    assert again.error_after <= report.error_after
