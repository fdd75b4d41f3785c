"""GPTQ (groupquant.calib.gptq) against a float64 GPTQ written from the paper, and the layer step's
guarantees: never worse than round to nearest on the layer objective, results that requantize to
themselves (so state_dict, pack_model and export reproduce them)."""
from __future__ import annotations

import math

import pytest
import torch

import groupquant as gq
from groupquant.calib.gptq import gptq_quantize
from groupquant.calib.hessian import output_error
from groupquant.calib.methods import calibrate_layer
from groupquant.calib.weight_grid import WeightGrid
from groupquant.formats import get_format
from groupquant.nn import QuantLinear, quantize_model
from groupquant.nn.recipes import recipe

FP4_POSITIVE = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _fp4_nearest(v: float) -> float:
    """Nearest FP4 E2M1 value (saturating), by search over the value list."""
    mag = min(FP4_POSITIVE, key=lambda g: abs(abs(v) - g))
    return math.copysign(mag, v)


def _mx_scales(w: torch.Tensor, block: int) -> torch.Tensor:
    """OCP floor-rule scales 2^(floor(log2 amax) - 2) per row and block (float64, from math.frexp)."""
    o, i = w.shape
    out = torch.zeros(o, i // block, dtype=torch.float64)
    for r in range(o):
        for b in range(i // block):
            amax = float(w[r, b * block:(b + 1) * block].abs().max())
            out[r, b] = 2.0 ** (math.frexp(amax)[1] - 1 - 2)
    return out


def paper_gptq(w: torch.Tensor, h: torch.Tensor, scales: torch.Tensor, block: int, percdamp: float,
               order: list) -> torch.Tensor:
    """Frantar et al. 2022, Algorithm 1, in float64, one column at a time (no lazy batches), columns
    visited in ``order``; each element rounded to the nearest FP4 value times its fixed block scale."""
    W = w.double().clone()
    H = h.double().clone()
    H += percdamp * torch.diagonal(H).mean() * torch.eye(H.shape[0], dtype=torch.float64)
    p = torch.tensor(order)
    W, H = W[:, p], H[p][:, p]
    Hinv = torch.linalg.cholesky(torch.linalg.inv(H)).T  # upper factor: Hinv = U^T U
    Q = torch.zeros_like(W)
    for j in range(W.shape[1]):
        col = order[j]
        for r in range(W.shape[0]):
            s = float(scales[r, col // block])
            Q[r, j] = s * _fp4_nearest(float(W[r, j]) / s)
        err = (W[:, j] - Q[:, j]) / Hinv[j, j]
        W[:, j:] -= err[:, None] * Hinv[j, j:][None, :]
    out = torch.empty_like(Q)
    out[:, p] = Q
    return out


def _problem(seed: int, o: int = 6, i: int = 32, tokens: int = 64):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(o, i, generator=g)
    x = torch.randn(tokens, i, generator=g) @ torch.randn(i, i, generator=g)  # correlated inputs
    h = (x.double().T @ x.double()) / tokens
    return w, h


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_matches_float64_paper_algorithm(seed: int, act_order: bool) -> None:
    w, h = _problem(seed)
    block = 8
    scales = _mx_scales(w, block)
    grid = WeightGrid(get_format("fp4_e2m1"), block, scales.float())
    order = (torch.argsort(torch.diagonal(h), descending=True, stable=True).tolist() if act_order
             else list(range(w.shape[1])))
    ours = gptq_quantize(w, h, grid, percdamp=0.01, batch_size=5, act_order=act_order)  # 5: lazy batches cut blocks
    ref = paper_gptq(w, h, scales, block, 0.01, order)
    assert torch.equal(ours.double(), ref)


def test_gptq_beats_round_to_nearest_on_objective() -> None:
    w, h = _problem(3, o=16, i=64, tokens=256)
    grid = WeightGrid(get_format("fp4_e2m1"), 32, _mx_scales(w, 32).float())
    rtn = grid.quantize(w)
    q = gptq_quantize(w, h, grid)
    assert output_error(w, q, h) < output_error(w, rtn, h)


def test_gptq_bad_settings_are_named() -> None:
    w, h = _problem(0)
    grid = WeightGrid(get_format("fp4_e2m1"), 8, _mx_scales(w, 8).float())
    with pytest.raises(ValueError, match="percdamp"):
        gptq_quantize(w, h, grid, percdamp=-1.0)
    with pytest.raises(ValueError, match="batch_size"):
        gptq_quantize(w, h, grid, batch_size=0)
    with pytest.raises(ValueError, match=r"H \[I, I\]"):
        gptq_quantize(w, h[:4, :4], grid)


def _layer(recipe_name: str, o: int, i: int, seed: int) -> QuantLinear:
    torch.manual_seed(seed)
    model = quantize_model(torch.nn.Sequential(torch.nn.Linear(i, o)), recipe=recipe_name, functional=False)
    return model[0]


FAKE_QUANT_NAME = {"mxfp4_weight_only": "fp4_e2m1", "mxfp4": "fp4_e2m1", "mxfp8": "fp8_e4m3",
                   "nvfp4_weight_only": "nvfp4", "nvfp4": "nvfp4"}


@pytest.mark.parametrize("recipe_name", sorted(FAKE_QUANT_NAME))
@pytest.mark.parametrize("methods", [("gptq",), ("scale_search", "gptq"), ("scale_search",)])
@pytest.mark.parametrize("seed", [0, 1])
def test_layer_step_never_worse_than_rtn_and_requantizes_to_itself(recipe_name: str, methods: tuple,
                                                                   seed: int) -> None:
    layer = _layer(recipe_name, 24, 64, seed)
    g = torch.Generator().manual_seed(seed + 10)
    # an input distribution with outlier channels and low rank: GPTQ's hard case
    x = torch.randn(48, 64, generator=g) * torch.where(torch.rand(64, generator=g) < 0.1, 20.0, 1.0)
    h = x.double().T @ x.double() / 48
    w0 = layer.weight.detach().clone()
    rtn_error = output_error(w0, gq.fake_quant(w0, FAKE_QUANT_NAME[recipe_name]), h)
    reports = calibrate_layer("l", layer, h, {m: {} for m in methods})
    w1 = layer.weight.detach()
    fq = gq.fake_quant(w1, FAKE_QUANT_NAME[recipe_name])  # the library's own quantizer, independent of calib
    assert torch.equal(fq, w1) or torch.equal(w1, w0)  # stored on the grid (or left as it was)
    assert output_error(w0, fq, h) <= rtn_error
    assert [r.method for r in reports] == list(methods)
    assert reports[0].error_before == pytest.approx(rtn_error, rel=1e-9)


@pytest.mark.parametrize("recipe_name", ["mxfp4_weight_only", "nvfp4_weight_only"])
def test_calibrated_layer_survives_state_dict_and_packing(recipe_name: str) -> None:
    layer = _layer(recipe_name, 16, 64, 0)
    x = torch.randn(32, 64)
    w0 = layer.weight.detach().clone()
    calibrate_layer("l", layer, x.double().T @ x.double() / 32, {"scale_search": {}, "gptq": {}})
    assert not torch.equal(layer.weight, w0)
    fresh = _layer(recipe_name, 16, 64, 5)
    fresh.load_state_dict(layer.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(x), layer(x))
        packed = gq.pack_model(torch.nn.Sequential(layer))[0]
        assert torch.equal(packed.dequantized_weight(), layer.quant_weight().value)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_pins_keep_the_gptq_result_on_requantization(seed: int) -> None:
    """NVFP4's scales are recomputed from the stored weight: each block's pinned maximum gives back
    its block scale and the tensor scale, so GPTQ's result requantizes to itself up to float ulps."""
    from groupquant.calib.weight_grid import rule_grid
    layer = _layer("nvfp4_weight_only", 16, 64, seed)
    x = torch.randn(32, 64) * torch.linspace(0.1, 5, 64)
    h = x.double().T @ x.double() / 32
    w = layer.weight.detach()
    q = gptq_quantize(w, h, rule_grid(layer))
    assert (gq.fake_quant(q, "nvfp4") - q).abs().max() <= 1e-6 * w.abs().max()


def test_gptq_names_non_finite_weights_and_hessians() -> None:
    w, h = _problem(0)
    grid = WeightGrid(get_format("fp4_e2m1"), 8, _mx_scales(w, 8).float())
    h_bad = h.clone()
    h_bad[1, 2] = math.nan
    with pytest.raises(ValueError, match=r"gptq: the H \(the input second moment\) holds 1 non-finite value"):
        gptq_quantize(w, h_bad, grid)
    w_bad = w.clone()
    w_bad[0, 0] = math.inf
    with pytest.raises(ValueError, match="gptq: the weight holds 1 non-finite value"):
        gptq_quantize(w_bad, h, grid)


def test_layer_step_names_a_non_finite_hessian() -> None:
    layer = _layer("mxfp4_weight_only", 8, 64, 0)
    h = torch.eye(64, dtype=torch.float64)
    h[0, 1] = math.nan
    with pytest.raises(ValueError, match=r"calibration of layer 'fc': its input second moment H holds NaN"):
        calibrate_layer("fc", layer, h, {"gptq": {}})
