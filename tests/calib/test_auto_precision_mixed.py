"""auto_precision with (weights, activations) pairs and an activation budget: the two-budget
assignment against brute force, activation bits, the layer that gets the wider activations, and
bad input."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import groupquant as gq
from groupquant.inject import UnknownSettingError
from groupquant.calib import knapsack
from groupquant.calib.auto_precision import activation_bits, assign_two, auto_precision, layer_bits

PAIRS = [("mxfp4", "mxfp4"), ("mxfp4", "mxfp8")]


def _brute(wc, ac, sens, capw, capa):
    """Least total sensitivity over every assignment within both capacities (None: none fits)."""
    layers, cands = len(sens), len(sens[0])
    best = None
    for pick in itertools.product(range(cands), repeat=layers):
        if sum(wc[l][c] for l, c in enumerate(pick)) <= capw and sum(ac[l][c] for l, c in enumerate(pick)) <= capa:
            total = sum(sens[l][c] for l, c in enumerate(pick))
            best = total if best is None else min(best, total)
    return best


def _uniform_best(wc, ac, sens, capw, capa):
    """Least total sensitivity of a uniform choice within both capacities (None: none fits)."""
    totals = [sum(row[i] for row in sens) for i in range(len(sens[0]))
              if sum(row[i] for row in wc) <= capw and sum(row[i] for row in ac) <= capa]
    return min(totals) if totals else None


def _instance(data, layers, cands):
    wc = [[data.draw(st.integers(1, 30)) for _ in range(cands)] for _ in range(layers)]
    ac = [[data.draw(st.integers(1, 30)) for _ in range(cands)] for _ in range(layers)]
    sens = [[data.draw(st.floats(0, 100)) for _ in range(cands)] for _ in range(layers)]
    capw = data.draw(st.integers(sum(min(r) for r in wc), sum(max(r) for r in wc)))
    capa = data.draw(st.integers(sum(min(r) for r in ac), sum(max(r) for r in ac)))
    return wc, ac, sens, capw, capa


@settings(max_examples=80, deadline=None)
@given(data=st.data(), layers=st.integers(1, 4), cands=st.integers(1, 3))
def test_two_budget_assignment_is_the_brute_force_optimum(data, layers: int, cands: int) -> None:
    wc, ac, sens, capw, capa = _instance(data, layers, cands)
    best = _brute(wc, ac, sens, capw, capa)
    if best is None:
        with pytest.raises(ValueError, match="no assignment meets both"):
            assign_two(wc, ac, sens, capw, capa)
        return
    got, exact = assign_two(wc, ac, sens, capw, capa)
    assert exact
    assert sum(wc[l][c] for l, c in enumerate(got)) <= capw
    assert sum(ac[l][c] for l, c in enumerate(got)) <= capa
    total = sum(sens[l][c] for l, c in enumerate(got))
    assert total == pytest.approx(best, rel=1e-12, abs=1e-12)
    uniform = _uniform_best(wc, ac, sens, capw, capa)
    assert uniform is None or total <= uniform + 1e-9


@settings(max_examples=40, deadline=None)
@given(data=st.data(), layers=st.integers(1, 4), cands=st.integers(1, 3))
def test_coarsened_assignment_fits_and_beats_every_uniform_choice(data, layers: int, cands: int) -> None:
    wc, ac, sens, capw, capa = _instance(data, layers, cands)
    saved = knapsack.MAX_STATES
    knapsack.MAX_STATES = 6  # a table of at most 6 states: the costs are coarsened
    try:
        try:
            got, exact = assign_two(wc, ac, sens, capw, capa)
        except ValueError:
            assert _uniform_best(wc, ac, sens, capw, capa) is None  # refused only when no uniform choice fits
            return
    finally:
        knapsack.MAX_STATES = saved
    assert sum(wc[l][c] for l, c in enumerate(got)) <= capw
    assert sum(ac[l][c] for l, c in enumerate(got)) <= capa
    uniform = _uniform_best(wc, ac, sens, capw, capa)
    assert uniform is None or sum(sens[l][c] for l, c in enumerate(got)) <= uniform + 1e-9


def test_equal_costs_leave_a_one_state_dimension_and_stay_exact() -> None:
    # every candidate costs the same weight bits (MXFP4 weights everywhere): huge costs, one state
    wc = [[10 ** 12, 10 ** 12]] * 3
    ac = [[425, 825], [425, 825], [425, 825]]
    got, exact = assign_two(wc, ac, [[5.0, 1.0], [9.0, 0.0], [3.0, 2.0]], 3 * 10 ** 12, 425 * 2 + 825)
    assert exact and got == [0, 1, 0]


def test_activation_bits_count_elements_and_row_scales() -> None:
    assert activation_bits("mxfp4", 64) == 64 * 4 + 2 * 8
    assert activation_bits("mxfp8", 64) == 64 * 8 + 2 * 8
    assert activation_bits("nvfp4", 64) == 64 * 4 + 4 * 8  # the FP32 tensor scale is shared by the tokens
    assert activation_bits("mxfp4_weight_only", 64) == 64 * 32  # float inputs
    assert activation_bits("float", 64, torch.bfloat16) == 64 * 16
    assert activation_bits("mxfp4", 40) == 40 * 4 + 2 * 8  # a partial block has a scale too


def _chain(seed: int = 0) -> torch.nn.Module:
    """Three 64 x 64 linear layers; the input of layer 1 has one outlier channel per 32-block
    (layer 0's bias: 60 at features 0 and 32) that layer 1 ignores (zero columns): MXFP4 on that
    input rounds the other 31 elements of each block (about 1) to zero, so its activation error is
    by far the largest."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 64, bias=index == 0) for index in range(3)))
    with torch.no_grad():
        for layer in model:
            layer.weight.copy_(torch.randn(64, 64) / 8)
        model[0].bias.zero_()
        model[0].bias[[0, 32]] = 60.0
        model[1].weight[:, [0, 32]] = 0
    return model


_FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6])


def _mxfp4_reference(x: np.ndarray) -> np.ndarray:
    """MXFP4 of the rows of ``x`` in float64: per 32 elements a power-of-two scale 2^(floor(log2 amax) - 2),
    elements to the nearest E2M1 value (saturating at 6)."""
    blocks = x.reshape(x.shape[0], -1, 32)
    amax = np.abs(blocks).max(axis=-1, keepdims=True)
    scale = 2.0 ** (np.floor(np.log2(np.maximum(amax, 1e-30))) - 2)
    mag = np.abs(blocks) / scale
    nearest = _FP4[np.abs(mag[..., None] - _FP4).argmin(axis=-1)]
    return (np.sign(blocks) * nearest * scale).reshape(x.shape)


def test_the_activation_budget_widens_the_layer_with_the_largest_activation_error() -> None:
    model = _chain()
    data = [torch.randn(16, 64, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    # reference: each layer's activation-only error sum ||x W^T - q4(x) W^T||^2 on the float model
    errors = []
    with torch.no_grad():
        for layer_index in range(3):
            total = 0.0
            for x in data:
                h = x
                for layer in model[:layer_index]:
                    h = layer(h)
                w = model[layer_index].weight.double().numpy()
                hx = h.double().numpy()
                total += float(((hx @ w.T - _mxfp4_reference(hx) @ w.T) ** 2).sum())
            errors.append(total)
    widest = str(int(np.argmax(errors)))
    assert widest == "1"  # the construction (docstring of _chain)
    # 5.6 bits per activation element: one of the three equal layers at 8.25, the others at 4.25
    model = auto_precision(model, data, candidates=PAIRS, budget_bits=4.25, activation_budget_bits=5.6,
                           progress=False)
    wide = [name for name, label in model.precision_assignment.items() if label == "w=mxfp4,a=mxfp8"]
    assert wide == [widest]
    for name, label in model.precision_assignment.items():
        layer = model.get_submodule(name)
        assert isinstance(layer, gq.nn.QuantLinear)
        assert layer.weight_quant.spec.fmt.bit_width == 4
        assert layer.input_quant.spec.fmt.bit_width == (8 if name == widest else 4)
    assert "bits/act" in model.precision_table
    assert "bits per activation element (budget 5.6)" in model.precision_table.splitlines()[-1]


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 96), torch.nn.ReLU(),
                               torch.nn.Linear(96, 8))


def test_both_budgets_hold_and_no_uniform_choice_does_better() -> None:
    data = [torch.randn(8, 64, generator=torch.Generator().manual_seed(i)) for i in range(3)]
    pairs = [("mxfp4", "mxfp4"), ("mxfp4", "mxfp8"), ("mxfp8", "mxfp4"), ("mxfp8", "mxfp8")]
    budget, act_budget = 6.0, 6.5
    model = auto_precision(_mlp(), data, candidates=pairs, budget_bits=budget, activation_budget_bits=act_budget,
                           progress=False)
    labels = [f"w={w},a={a}" for w, a in pairs]
    shapes = {"0": (64, 64), "2": (96, 64), "4": (8, 96)}
    tokens = 3 * 8

    def weight_bits(label):
        return sum(layer_bits(label.split(",")[0][2:], *shape) for shape in shapes.values())

    def act_bits(name, label):
        return tokens * activation_bits(label.split(",")[1][2:], shapes[name][1])

    chosen = model.precision_assignment
    weights = sum(o * i for o, i in shapes.values())
    elements = tokens * sum(i for _, i in shapes.values())
    assert sum(layer_bits(chosen[n].split(",")[0][2:], *shapes[n]) for n in shapes) <= budget * weights
    assert sum(act_bits(n, chosen[n]) for n in shapes) <= act_budget * elements
    sens = model.precision_sensitivity
    total = sum(sens[n][chosen[n]] for n in shapes)
    for label in labels:
        if weight_bits(label) <= budget * weights and sum(act_bits(n, label) for n in shapes) <= act_budget * elements:
            assert total <= sum(sens[n][label] for n in shapes) + 1e-9
    assert len(set(chosen.values())) > 1  # the budgets allow no uniform choice but the smallest: a mix


def test_without_an_activation_budget_pairs_follow_the_weight_budget_alone() -> None:
    data = [torch.randn(8, 64) for _ in range(2)]
    model = auto_precision(_mlp(), data, candidates=PAIRS, budget_bits=4.25, progress=False)
    # activations cost nothing without their budget: every layer takes its least sensitive pair
    for name, row in model.precision_sensitivity.items():
        assert model.precision_assignment[name] == min(row, key=row.get)
    assert "bits/act" not in model.precision_table


def test_pairs_with_float_sides_and_a_single_pair() -> None:
    data = [torch.randn(8, 64) for _ in range(2)]
    model = auto_precision(_mlp(), data, candidates=[("mxfp4", "float")], budget_bits=5.0, progress=False)
    layer = model.get_submodule("0")
    assert layer.weight_quant.spec.fmt.bit_width == 4 and layer.input_quant.quantizer is None
    model = auto_precision(_mlp(), data, candidates=[("float", "mxfp8"), "float"], budget_bits=math.inf,
                           activation_budget_bits=9.0, progress=False)
    assert set(model.precision_assignment.values()) == {"w=float,a=mxfp8"}  # float inputs (32 bits) do not fit


def test_a_llama_takes_pairs_an_activation_budget_and_gptq() -> None:
    from . import tiny_models as tm
    model = auto_precision(tm.llama(), [tm.ids(seed=s) for s in range(2)], candidates=PAIRS, budget_bits=4.25,
                           activation_budget_bits=5.0, exclude=["lm_head"], methods=["gptq"], progress=False)
    labels = set(model.precision_assignment.values())
    assert labels <= {"w=mxfp4,a=mxfp4", "w=mxfp4,a=mxfp8"} and len(labels) == 2
    assert torch.isfinite(model(tm.ids(seed=7)).logits).all()


def test_bad_budgets_pairs_and_names_are_named() -> None:
    data = [torch.randn(4, 64)]
    for bad in (0, -1.0, math.nan, "5", True):
        with pytest.raises(ValueError, match=r"activation_budget_bits must be a positive number of bits per "
                                             r"activation element"):
            auto_precision(_mlp(), data, candidates=PAIRS, budget_bits=5.0, activation_budget_bits=bad, progress=False)
    training = _mlp().train()
    with pytest.raises(ValueError, match=r"activation_budget_bits=4.0 is below the cheapest activations \(4.2500"):
        auto_precision(training, data, candidates=PAIRS, budget_bits=5.0, activation_budget_bits=4.0, progress=False)
    assert training.training and type(training[0]) is torch.nn.Linear  # refused after the sensitivity pass: unchanged
    with pytest.raises(ValueError, match=r"candidates\[1\]: a pair must be \(weights, activations\).*3 item"):
        auto_precision(_mlp(), data, candidates=[("mxfp4", "mxfp4"), ("mxfp4", "mxfp8", "mxfp8")], budget_bits=5.0,
                       progress=False)
    with pytest.raises(ValueError, match=r"candidates\[0\]: a pair must be .*1 item"):
        auto_precision(_mlp(), data, candidates=[("mxfp4",)], budget_bits=5.0, progress=False)
    with pytest.raises(ValueError, match=r"candidates\[0\] \(activations\): unknown recipe 'mxfp9'; did you mean"):
        auto_precision(_mlp(), data, candidates=[("mxfp4", "mxfp9")], budget_bits=5.0, progress=False)
    with pytest.raises(UnknownSettingError, match=r"candidates\[1\]: unknown recipe 'mxfp5'"):
        auto_precision(_mlp(), data, candidates=["mxfp4", "mxfp5"], budget_bits=5.0, progress=False)
    with pytest.raises(ValueError, match=r"candidates\[0\]: the weights of a pair must be a recipe name"):
        auto_precision(_mlp(), data, candidates=[(("mxfp4", "mxfp4"), "mxfp8")], budget_bits=5.0, progress=False)
    with pytest.raises(ValueError, match=r"candidates name 'w=mxfp4,a=mxfp8' more than once"):
        auto_precision(_mlp(), data, candidates=[("mxfp4", "mxfp8"), ["mxfp4", "mxfp8"]], budget_bits=5.0,
                       progress=False)
    # cheapest weights (W4A8) and cheapest activations (W8A4) come from different candidates: no assignment
    with pytest.raises(ValueError, match=r"budget_bits=4.25 with activation_budget_bits=4.25: no assignment meets "
                                         r"both"):
        auto_precision(_mlp(), data, candidates=[("mxfp4", "mxfp8"), ("mxfp8", "mxfp4")], budget_bits=4.25,
                       activation_budget_bits=4.25, progress=False)


def test_model_level_methods_run_on_the_mixed_model_as_ptq_runs_them() -> None:
    """auto_precision(methods=[smooth, rotate, scale_search, gptq]) is the plain assignment followed by
    smooth_model, rotate_model and the layer methods, composed by hand: the same logits bit for bit."""
    from groupquant.calib.ptq import calibrate
    from groupquant.calib.rotate import rotate_model
    from groupquant.calib.smooth import smooth_model
    from . import tiny_models as tm
    items = [tm.ids(seed=s) for s in range(2)]
    kwargs = dict(candidates=PAIRS, budget_bits=4.25, activation_budget_bits=5.0, exclude=["lm_head"], progress=False)
    model = auto_precision(tm.llama(), items, methods=["smooth", "rotate", "scale_search", "gptq"], **kwargs)
    by_hand = auto_precision(tm.llama(), items, **kwargs)
    assert model.precision_assignment == by_hand.precision_assignment
    assert len(set(model.precision_assignment.values())) == 2  # a mixed model
    torch.manual_seed(0)
    smooth_model(by_hand, items, progress=False, exclude=["lm_head"])
    rotate_model(by_hand, seed=0, exclude=["lm_head"], probe=items[0])
    calibrate(by_hand, items, {"scale_search": {}, "gptq": {}}, progress=False)
    probe = tm.ids(seed=7)
    with torch.no_grad():
        assert torch.equal(model(probe).logits, by_hand(probe).logits)
    rotated = [n for n, m in model.named_modules() if getattr(m, "input_rotation", None) is not None]
    assert rotated and {r.method for r in model.calibration_report} >= {"smooth", "rotate", "scale_search", "gptq"}


def test_a_model_level_method_that_does_not_apply_is_refused_before_any_change() -> None:
    from groupquant.calib.float_check import MethodRefused
    model = _mlp()  # no norm to fold a smoothing scale into
    with pytest.raises(MethodRefused, match=r"'smooth'.*nothing was changed"):
        auto_precision(model, [torch.randn(4, 64)], candidates=PAIRS, budget_bits=5.0, methods=["smooth", "gptq"],
                       progress=False)
    assert all(type(m) in (torch.nn.Linear, torch.nn.ReLU, torch.nn.Sequential) for m in model.modules())
    with pytest.raises(TypeError, match=r"auto_precision: seed must be an int"):
        auto_precision(_mlp(), [torch.randn(4, 64)], candidates=PAIRS, budget_bits=5.0, seed=1.5, progress=False)
