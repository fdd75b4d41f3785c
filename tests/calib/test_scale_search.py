"""scale_search (groupquant.calib.scale_search): a brute-force reference per block, the MSE scale
search it generalises (H = I), never worse than the rule per block, NVFP4 results that survive."""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import groupquant as gq
from groupquant.calib.methods import calibrate_layer
from groupquant.calib.scale_search import block_errors, search_grid
from groupquant.calib.weight_grid import WeightGrid, rule_grid
from groupquant.core.granularity import ScaleGranularity
from groupquant.core.mse_scale import mse_scale
from groupquant.formats import get_format
from groupquant.nn import quantize_model

FP4 = get_format("fp4_e2m1")


def _mx_grid(w: torch.Tensor, block: int) -> WeightGrid:
    amax = w.reshape(w.shape[0], -1, block).abs().amax(-1)
    e = torch.tensor([[math.frexp(float(a))[1] - 1 - FP4.emax for a in row] for row in amax])
    return WeightGrid(FP4, block, torch.pow(2.0, e.float()))


def _fp4_round(v: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value by search over the grid (ties to even code)."""
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    mag = grid[(v.abs().unsqueeze(-1) - grid).abs().argmin(-1)]
    return torch.copysign(mag, v)


def test_search_matches_brute_force_per_block() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(5, 24, generator=g) * torch.rand(5, 24, generator=g) * 3
    x = torch.randn(40, 24, generator=g) @ torch.randn(24, 24, generator=g)
    h = x.double().T @ x.double() / 40
    block = 8
    grid = _mx_grid(w, block)
    got = search_grid(w, h, grid, below=2, above=1).scale
    for r in range(5):
        for b in range(3):
            cols = slice(b * block, (b + 1) * block)
            hb = h[cols, cols]
            best = None
            for d in (0, 1, -1, -2):  # the rule first: it wins ties
                s = float(grid.scale[r, b]) * 2.0 ** d
                e = w[r, cols].double() - s * _fp4_round(w[r, cols].double() / s)
                err = float(e @ hb @ e)
                if best is None or err < best[0]:
                    best = (err, s)
            assert float(got[r, b]) == best[1]


def test_search_with_identity_h_is_the_mse_weight_scale() -> None:
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 64, generator=g) * torch.exp(torch.randn(8, 64, generator=g))
    searched = search_grid(w, torch.eye(64, dtype=torch.float64), _mx_grid(w, 32), below=2, above=1).scale
    ref = mse_scale(w, FP4, ScaleGranularity("group", 1, 32), below=2, above=1)
    assert torch.equal(searched, ref.reshape(8, 2))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), outliers=st.floats(1.0, 50.0))
def test_search_is_never_worse_than_the_rule_per_block(seed: int, outliers: float) -> None:
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(4, 32, generator=g) * torch.where(torch.rand(4, 32, generator=g) < 0.05, outliers, 1.0)
    x = torch.randn(16, 32, generator=g)
    h = x.double().T @ x.double() / 16
    grid = _mx_grid(w, 16)
    searched = search_grid(w, h, grid)
    assert (block_errors(w, searched.quantize(w), h, 16) <= block_errors(w, grid.quantize(w), h, 16)).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nvfp4_searched_scales_survive_requantization(seed: int) -> None:
    torch.manual_seed(seed)
    layer = quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 16)), recipe="nvfp4_weight_only")[0]
    x = torch.randn(32, 64) * torch.linspace(0.1, 5, 64)
    h = x.double().T @ x.double() / 32
    w0 = layer.weight.detach().clone()
    grid = rule_grid(layer)
    searched = search_grid(w0, h, grid)
    assert not torch.equal(searched.scale, grid.scale)  # the search moved some block scales
    calibrate_layer("l", layer, h, {"scale_search": {}})
    w1 = layer.weight.detach()
    assert torch.equal(gq.fake_quant(w1, "nvfp4"), w1)
    assert not torch.equal(w1, w0)


def test_search_bad_window_is_named() -> None:
    w = torch.randn(2, 32)
    with pytest.raises(ValueError, match="below"):
        search_grid(w, torch.eye(32, dtype=torch.float64), _mx_grid(w, 32), below=-1)


def test_scale_search_names_a_non_finite_hessian() -> None:
    torch.manual_seed(0)
    layer = gq.quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 8)), recipe="mxfp4_weight_only")[0]
    w = layer.weight.detach()
    h = torch.eye(64, dtype=torch.float64)
    h[3, 3] = math.inf
    with pytest.raises(ValueError, match=r"scale_search: the H \(the input second moment\) holds 1 non-finite"):
        search_grid(w, h, rule_grid(layer))
