"""auto_precision: the assignment against brute force, layer bits, the conversion and bad input."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import groupquant as gq
from groupquant.calib.auto_precision import assign, auto_precision, layer_bits


@settings(max_examples=60, deadline=None)
@given(data=st.data(), layers=st.integers(1, 5), cands=st.integers(1, 3))
def test_assignment_is_the_brute_force_optimum(data, layers: int, cands: int) -> None:
    costs = [[data.draw(st.integers(1, 40)) for _ in range(cands)] for _ in range(layers)]
    sens = [[data.draw(st.floats(0, 100)) for _ in range(cands)] for _ in range(layers)]
    capacity = data.draw(st.integers(sum(min(r) for r in costs), sum(max(r) for r in costs)))
    got, exact = assign(costs, sens, capacity)
    assert exact
    assert sum(costs[l][c] for l, c in enumerate(got)) <= capacity
    best = min(sum(sens[l][c] for l, c in enumerate(pick)) for pick in itertools.product(range(cands), repeat=layers)
               if sum(costs[l][c] for l, c in enumerate(pick)) <= capacity)
    assert sum(sens[l][c] for l, c in enumerate(got)) == pytest.approx(best, rel=1e-12, abs=1e-12)


def test_assignment_budget_below_cheapest_is_an_error() -> None:
    with pytest.raises(ValueError, match="below the cheapest"):
        assign([[4, 8], [4, 8]], [[1.0, 0.0], [1.0, 0.0]], 7)


def test_layer_bits_count_elements_scales_and_tensor_scale() -> None:
    assert layer_bits("mxfp4", 8, 64) == 8 * 64 * 4 + 8 * 2 * 8
    assert layer_bits("mxfp8", 8, 64) == 8 * 64 * 8 + 8 * 2 * 8
    assert layer_bits("nvfp4", 8, 64) == 8 * 64 * 4 + 8 * 4 * 8 + 32
    assert layer_bits("float", 8, 64) == 8 * 64 * 32


def _mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 8))


def test_auto_precision_meets_the_budget_and_converts() -> None:
    data = [torch.randn(8, 64) for _ in range(2)]
    model = auto_precision(_mlp(), data, candidates=["mxfp4", "mxfp8"], budget_bits=6.0, progress=False)
    assignment = model.precision_assignment
    assert set(assignment) == {"0", "2", "4"} and set(assignment.values()) <= {"mxfp4", "mxfp8"}
    sizes = {"0": 64 * 64, "2": 64 * 64, "4": 8 * 64}
    total = sum(layer_bits(assignment[n], *model.get_submodule(n).weight.shape) for n in sizes)
    assert total <= 6.0 * sum(sizes.values())
    assert "mxfp8" in assignment.values() and "mxfp4" in assignment.values()  # 6 bits: not all of either
    for name, chosen in assignment.items():
        layer = model.get_submodule(name)
        assert isinstance(layer, gq.nn.QuantLinear)
        assert layer.weight_quant.spec.fmt.bit_width == (4 if chosen == "mxfp4" else 8)
    assert "sens[mxfp4]" in model.precision_table


def test_auto_precision_prefers_the_sensitive_layer_for_more_bits() -> None:
    model = _mlp()
    with torch.no_grad():
        model[2].weight[:, :32] *= 100  # outlier inputs make layer 2 the most sensitive at 4 bits
    data = [torch.randn(8, 64) for _ in range(2)]
    # 6.2 bits: room for one of the two 64 x 64 layers at mxfp8, not both
    model = auto_precision(model, data, candidates=["mxfp4", "mxfp8"], budget_bits=6.2, progress=False)
    assert model.precision_assignment["2"] == "mxfp8" and model.precision_assignment["0"] == "mxfp4"


def test_auto_precision_bad_input_is_named() -> None:
    data = [torch.randn(2, 64)]
    with pytest.raises(ValueError, match=r"budget_bits=3.0 is below the smallest candidate \('mxfp4': 4.25"):
        auto_precision(_mlp(), data, candidates=["mxfp4", "mxfp8"], budget_bits=3.0, progress=False)
    with pytest.raises(ValueError, match="candidates is empty"):
        auto_precision(_mlp(), data, candidates=[], budget_bits=5.0, progress=False)
    with pytest.raises(ValueError, match="calibration_data is empty"):
        auto_precision(_mlp(), [], candidates=["mxfp4"], budget_bits=5.0, progress=False)


class _TiedLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4)
        self.embed = torch.nn.Embedding(40, 64)
        self.body = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 40, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.body(self.embed(ids))))


def test_auto_precision_leaves_a_tied_head_float_unless_asked(capsys) -> None:
    data = [torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    model = auto_precision(_TiedLM(), data, candidates=["mxfp4", "mxfp8"], budget_bits=8.5, progress=False)
    assert set(model.precision_assignment) == {"body"} and type(model.head) is torch.nn.Linear
    assert "'head' (tied to embed.weight)" in capsys.readouterr().err
    model = auto_precision(_TiedLM(), data, candidates=["mxfp4", "mxfp8"], budget_bits=8.5, progress=False,
                           quantize_head=True)
    assert set(model.precision_assignment) == {"body", "head"}
    assert isinstance(model.head, gq.nn.QuantLinear) and model.head.weight is model.embed.weight


def test_auto_precision_takes_an_unlimited_budget_and_a_single_candidate_name() -> None:
    data = [torch.randn(8, 64) for _ in range(2)]
    model = auto_precision(_mlp(), data, candidates=["mxfp4", "mxfp8", "float"], budget_bits=math.inf, progress=False)
    # no limit: each layer takes its least sensitive candidate, float (zero error)
    assert set(model.precision_assignment.values()) == {"float"}
    model = auto_precision(_mlp(), data, candidates="mxfp4", budget_bits=5.0, progress=False)
    assert set(model.precision_assignment.values()) == {"mxfp4"}
    with pytest.raises(ValueError, match="budget_bits must be a positive number"):
        auto_precision(_mlp(), data, candidates=["mxfp4"], budget_bits=math.nan, progress=False)


def test_auto_precision_names_non_finite_calibration_data() -> None:
    data = [torch.randn(8, 64), torch.full((8, 64), math.inf)]
    with pytest.raises(ValueError, match=r"calibration_data item 1 holds 512 non-finite value\(s\)"):
        auto_precision(_mlp(), data, candidates=["mxfp4", "mxfp8"], budget_bits=6.0, progress=False)


def test_auto_precision_names_the_layers_it_cannot_convert() -> None:
    from . import tiny_models as tm
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel has no nn.Linear layer left .*\(Conv1D x 8\)"):
        auto_precision(tm.gpt2(), [tm.ids()], candidates=["mxfp4", "mxfp8"], budget_bits=6.0, progress=False)
