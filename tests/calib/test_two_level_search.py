"""two_level_search (groupquant.calib.two_level_search): a brute-force float64 reference with
ml_dtypes roundings, never worse than round to nearest or scale_search on the block objective,
the 4-over-6 choice on hand-built blocks, and results that survive requantization, state_dict,
pack_model, every checkpoint format and ONNX bit for bit."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import groupquant as gq
from groupquant.calib.methods import calibrate_layer, resolve_methods
from groupquant.calib.scale_search import FACTORS, block_errors, search_grid
from groupquant.calib.two_level_search import PINS, TENSOR_FACTORS, two_level_grid
from groupquant.calib.weight_grid import rule_grid
from groupquant.nn import quantize_model

ml_dtypes = pytest.importorskip("ml_dtypes")
G = 16


def _e2m1(v: np.ndarray) -> np.ndarray:
    """Nearest E2M1 value (ties to even), saturated to +-6: ml_dtypes' cast after a clamp."""
    return np.clip(v, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float64)


def _ue4m3(v: float) -> float:
    """UE4M3 rounding of a positive scale, clamped to [2**-6, 448] first (NVFP4's block-scale rule)."""
    return float(np.float32(np.clip(np.float32(v), 2.0 ** -6, 448.0)).astype(ml_dtypes.float8_e4m3fn))


def _block_best(x: np.ndarray, hb: np.ndarray, s: float, g: np.float32, cheapest: bool) -> float:
    """Least ``e H e^T`` of one block on scale ``s * g`` over every pin (any column with
    ``cheapest``, else the largest element's; toward the element's sign, + for 0; none only at the
    smallest scale); element times step and the pin ``6 * step`` are rounded to
    float32, as the grid stores them."""
    step = np.float32(np.float32(s) * g)
    q = (_e2m1((x / step).astype(np.float32)).astype(np.float32) * step).astype(np.float64)
    options = [q] if s == 2.0 ** -6 else []
    for j in range(len(x)) if cheapest else [int(np.argmax(np.abs(x)))]:
        p = q.copy()
        p[j] = (-1.0 if x[j] < 0 else 1.0) * np.float64(np.float32(6.0) * step)
        options.append(p)
    return min(float((x - p) @ hb @ (x - p)) for p in options)


def _reference(w: torch.Tensor, h: torch.Tensor, factors, four_over_six: bool, cheapest: bool):
    """(least total, its tensor factor) by enumeration: every tensor factor, every block's candidate
    scales, every pin, the cheapest top block (scale 448)."""
    wn, hn = w.numpy().astype(np.float32), h.numpy()
    o, i = wn.shape
    g0 = np.float32(np.abs(wn).max()) / np.float32(2688.0)
    best = None
    for c in factors:
        g = np.float32(c * float(g0))
        errs, tops = np.zeros((o, i // G)), np.zeros((o, i // G))
        for r, b in itertools.product(range(o), range(i // G)):
            x = wn[r, b * G:(b + 1) * G].astype(np.float64)
            hb = hn[b * G:(b + 1) * G, b * G:(b + 1) * G]
            raw = np.float32(np.float32(np.abs(wn[r, b * G:(b + 1) * G]).max()) / np.float32(6.0)) / g
            rule = _ue4m3(raw)
            cands = [rule] + [_ue4m3(np.float32(rule) * np.float32(f)) for f in FACTORS]
            if four_over_six:
                cands.append(_ue4m3(raw * np.float32(1.5)))
            errs[r, b] = min(_block_best(x, hb, s, g, cheapest) for s in cands)
            tops[r, b] = _block_best(x, hb, 448.0, g, cheapest)
        total = errs.sum() + (tops - errs).min()
        if best is None or total < best[0]:
            best = (total, c)
    return best


def _layer(out_f: int, in_f: int, seed: int, recipe: str = "nvfp4_weight_only") -> torch.nn.Module:
    torch.manual_seed(seed)
    return quantize_model(torch.nn.Sequential(torch.nn.Linear(in_f, out_f)), recipe=recipe)[0]


def _hessian(in_f: int, seed: int, dead: int = 3) -> torch.Tensor:
    """H of inputs with outlier channels and ``dead`` channels that never fire."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, in_f, generator=g) * torch.where(torch.rand(in_f, generator=g) < 0.15, 8.0, 1.0)
    x[:, torch.randperm(in_f, generator=g)[:dead]] = 0
    return x.double().T @ x.double() / 64


@pytest.mark.parametrize("seed,pins", [(0, "cheapest"), (1, "largest")])
def test_search_matches_brute_force(seed: int, pins: str) -> None:
    layer = _layer(3, 32, seed)
    w = layer.weight.detach()
    h = _hessian(32, seed)
    factors = TENSOR_FACTORS + (1.5, 0.9375)
    res = two_level_grid(w, h, rule_grid(layer), tensor_factors=factors, pins=pins)
    total, factor = _reference(w, h, factors, True, pins == "cheapest")
    assert res.objective == pytest.approx(total, rel=1e-6)  # (the search's arithmetic is float32)
    assert res.tensor_factor == factor
    # the grid it returns has that objective, evaluated independently
    assert float(block_errors(w, res.grid.quantize(w), h, G).sum()) == pytest.approx(total, rel=1e-6)


def test_the_tensor_scale_search_moves_g_on_some_layer() -> None:
    """Not every layer keeps the rule's tensor scale (else the tensor candidates would be idle)."""
    factors = {two_level_grid(lay.weight.detach(), _hessian(64, s), rule_grid(lay), pins=pins).tensor_factor
               for s in range(3) for lay in [_layer(16, 64, s)] for pins in PINS}
    assert factors != {1.0}


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), outliers=st.floats(1.0, 50.0), single=st.booleans())
def test_never_worse_than_rule_or_scale_search(seed: int, outliers: float, single: bool) -> None:
    torch.manual_seed(seed)
    wq = gq.quantizers.NVFP4Weight.let(tensor_scale=False) if single else gq.quantizers.NVFP4Weight
    layer = gq.nn.QuantLinear(48, 6, weight_quant=wq)
    with torch.no_grad():
        layer.weight.mul_(torch.where(torch.rand(6, 48) < 0.05, outliers, 1.0))
    w = layer.weight.detach()
    h = _hessian(48, seed)
    rule = rule_grid(layer)
    got = two_level_grid(w, h, rule, two_level=not single)
    mine = float(block_errors(w, got.grid.quantize(w), h, G).sum())
    assert mine <= float(block_errors(w, rule.quantize(w), h, G).sum()) * (1 + 1e-6)
    assert mine <= float(block_errors(w, search_grid(w, h, rule).quantize(w), h, G).sum()) * (1 + 1e-6)
    cheap = two_level_grid(w, h, rule, two_level=not single, pins="cheapest").objective
    assert cheap <= mine * (1 + 1e-6)  # pins anywhere: a superset of the largest-element pins


def _one_block_layer(values) -> torch.nn.Module:
    """A single-level NVFP4 layer (g = 1) with one row: ``values`` (16)."""
    layer = gq.nn.QuantLinear(16, 1, bias=False, weight_quant=gq.quantizers.NVFP4Weight.let(tensor_scale=False))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([values], dtype=torch.float32))
    return layer


def test_four_over_six_chosen_where_a_dead_channel_takes_the_pin() -> None:
    # on the 4-grid of scale 1 (max 4 -> E2M1's 4) every value is exact; the rule's scale
    # ue4m3(4 / 6) = 0.6875 rounds them with errors; column 15 never fires (H = 0), so pinning it
    # at +-6 costs nothing
    values = [4.0, 3.0, 2.0, 1.5, 1.0, 0.5, -4.0, -3.0, 3.0, 2.0, 1.0, 0.5, -1.5, 4.0, 0.0, 0.25]
    h = torch.eye(16, dtype=torch.float64)
    h[15, 15] = 0.0
    layer = _one_block_layer(values)
    w = layer.weight.detach()
    assert float(rule_grid(layer).scale[0, 0]) == 0.6875
    res = two_level_grid(w, h, rule_grid(layer), two_level=False, pins="cheapest")
    assert float(res.grid.scale[0, 0]) == 1.0 and int(res.grid.pin[0, 0]) == 15
    assert res.objective == 0.0 and res.four_over_six == 1.0
    off = two_level_grid(w, h, rule_grid(layer), two_level=False, four_over_six=False, pins="cheapest")
    assert off.objective > 0.0 and float(off.grid.scale[0, 0]) != 1.0
    largest = two_level_grid(w, h, rule_grid(layer), two_level=False)  # the pin on a 4: costs (6 - 4)^2
    assert largest.four_over_six == 0.0 and largest.objective > 0.0
    # stored, the layer's own rule gives the 4-over-6 grid back: the 4-grid values plus the pin
    calibrate_layer("l", layer, h, {"two_level_search": {"pins": "cheapest"}})
    stored = layer.weight.detach()[0]
    assert torch.equal(stored[:15], torch.tensor(values[:15]))
    assert abs(float(stored[15])) == 6.0
    assert torch.equal(gq.fake_quant(layer.weight.detach(), "nvfp4", tensor_scale=False), layer.weight.detach())


def test_six_kept_where_the_block_sits_on_the_six_grid_or_every_pin_costs() -> None:
    h = torch.eye(16, dtype=torch.float64)
    on_six = [6.0, 4.0, 3.0, 2.0, -1.5, 1.0, 0.5, -6.0, 4.0, 3.0, 2.0, 1.0, 0.5, 0.0, -3.0, 1.5]
    layer = _one_block_layer(on_six)
    res = two_level_grid(layer.weight.detach(), h, rule_grid(layer), two_level=False)
    assert float(res.grid.scale[0, 0]) == 1.0 and res.objective == 0.0 and res.four_over_six == 0.0
    on_four = [4.0, 3.0, 2.0, 1.5, 1.0, 0.5, -4.0, -3.0, 3.0, 2.0, 1.0, 0.5, -1.5, 4.0, 0.0, 0.25]
    layer = _one_block_layer(on_four)  # every channel live: a pin at 6 costs at least (6 - 4)^2
    res = two_level_grid(layer.weight.detach(), h, rule_grid(layer), two_level=False, pins="cheapest")
    assert res.four_over_six == 0.0 and res.objective < 4.0


@pytest.mark.parametrize("seed,pins", [(0, "cheapest"), (1, "largest")])
def test_result_survives_state_dict_packing_checkpoints_and_onnx(tmp_path, seed: int, pins: str) -> None:
    layer = _layer(64, 64, seed)
    h = _hessian(64, seed)
    w0 = layer.weight.detach().clone()
    res = two_level_grid(w0, h, rule_grid(layer), pins=pins, tensor_factors=TENSOR_FACTORS + (1.5,))
    calibrate_layer("l", layer, h, {"two_level_search": {"pins": pins, "tensor_factors": TENSOR_FACTORS + (1.5,)}})
    w1 = layer.weight.detach()
    assert not torch.equal(w1, w0)
    assert torch.equal(gq.fake_quant(w1, "nvfp4"), w1)  # a fixed point of the layer's rule
    q = layer.group_quantized_weight()
    # the layer's own scales are the searched ones: block scales exactly, the tensor scale to an ulp
    assert torch.equal(q.scale.reshape(64, -1), res.block_scale)
    assert float(q.tensor_scale) == pytest.approx(res.grid.tensor_scale, rel=1e-6)
    model = torch.nn.Sequential(layer)
    x = torch.randn(8, 64)
    fresh = torch.nn.Sequential(_layer(64, 64, seed + 7))
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        want = model(x)
        assert torch.equal(fresh(x), want)
        packed = gq.pack_model(torch.nn.Sequential(_copy(layer)))[0]
        assert torch.equal(packed.dequantized_weight(), layer.quant_weight().value)
    for fmt, name in (("safetensors", "m.safetensors"), ("compressed-tensors", "ct"), ("gguf", "m.gguf")):
        loaded = gq.load(gq.save(model, tmp_path / name, format=fmt))
        got = loaded.layers["0"].group_quantized_weight()
        assert torch.equal(got.codes, q.codes) and torch.equal(got.scale_codes, q.scale_codes), fmt
        assert torch.equal(got.dequantize(), q.dequantize()), fmt
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from groupquant.export.onnx.model import export_onnx
    proto = export_onnx(model, x)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    y = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        np.testing.assert_allclose(y, want.numpy(), rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert onnx is not None


def _copy(layer: torch.nn.Module) -> torch.nn.Module:
    import copy
    return copy.deepcopy(layer)


def test_methods_options_and_refusals() -> None:
    assert list(resolve_methods(["gptq", "two_level_search"], "nvfp4")) == ["two_level_search", "gptq"]
    with pytest.raises(ValueError, match="two_level_search' replaces 'scale_search'"):
        resolve_methods(["scale_search", "two_level_search"], "nvfp4")
    with pytest.raises(ValueError, match="no option 'below'"):
        resolve_methods({"two_level_search": {"below": 1}}, "nvfp4")
    layer = _layer(4, 32, 0)
    w, h = layer.weight.detach(), torch.eye(32, dtype=torch.float64)
    with pytest.raises(ValueError, match="tensor_factors must be positive"):
        two_level_grid(w, h, rule_grid(layer), tensor_factors=[1.0, -2.0])
    with pytest.raises(ValueError, match="pins must be one of largest, cheapest"):
        two_level_grid(w, h, rule_grid(layer), pins="all")
    with pytest.raises(ValueError, match="four_over_six must be a bool"):
        two_level_grid(w, h, rule_grid(layer), four_over_six="yes")
    mx = _layer(4, 32, 0, "mxfp4_weight_only")
    with pytest.raises(ValueError, match="needs minifloat block scales"):
        two_level_grid(mx.weight.detach(), h, rule_grid(mx))
    # an MX layer in a mixed model gets the scale search's grid through the method
    reports = calibrate_layer("mx", mx, h, {"two_level_search": {}})
    assert reports[0].method == "two_level_search"


def test_ptq_runs_it_on_a_tiny_llama() -> None:
    from .tiny_models import llama
    model = llama(0)
    calib = [torch.randint(0, 96, (1, 16), generator=torch.Generator().manual_seed(0))]
    model = gq.ptq(model, calib, recipe="nvfp4_weight_only", methods=["two_level_search", "gptq"], progress=False)
    methods = {r.method for r in model.calibration_report}
    assert methods == {"two_level_search", "gptq"}
    for r in model.calibration_report:
        if r.method == "two_level_search":
            assert r.error_after <= r.error_before * (1 + 1e-9) or "kept round to nearest" in r.detail
