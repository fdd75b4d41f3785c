"""Asymmetric GPTQ inside ptq (``methods={"gptq": {"asymmetric": True}}``, GPTAQ's target): the
paired moments against float64 references taken by hooks on the float model and the public
``fake_quant`` of the quantized model's inputs, the float pass against the float model, the reported
objective against its definition, and the degenerate case (equal inputs: plain GPTQ)."""
from __future__ import annotations

import copy

import pytest
import torch

import groupquant as gq
from groupquant import fake_quant
from groupquant.calib.asymmetric import asymmetric_block
from groupquant.calib.blocks import capture_block_inputs, find_blocks, run_block
from groupquant.calib.float_check import float_mode

from .tiny_models import VOCAB, llama

ASYM = {"gptq": {"asymmetric": True}}


def _data(n: int, seed: int = 1, tokens: int = 16):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, VOCAB, (2, tokens), generator=g) for _ in range(n)]


def _inputs_of(model, layer_name, items):
    """float64 ``[tokens, I]`` of what ``layer_name`` receives when ``model`` runs ``items``."""
    seen = []
    handle = model.get_submodule(layer_name).register_forward_pre_hook(
        lambda m, a: seen.append(getattr(a[0], "value", a[0]).detach().reshape(-1, a[0].shape[-1]).double()))
    with torch.no_grad():
        for x in items:
            model(x)
    handle.remove()
    return torch.cat(seen)


def _mxfp4_input(raw: torch.Tensor) -> torch.Tensor:
    """The mxfp4 recipe's input quantizer, written independently: OCP MXFP4 over blocks of 32 of the last dim."""
    return fake_quant(raw.float(), "fp4_e2m1").double()


def test_paired_moments_and_float_pass_match_references():
    torch.set_num_threads(1)
    float_model = llama()
    q = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4", quantize_head=False)
    items = _data(3)
    _, blocks = find_blocks(q)
    quantized = run_block(q, blocks[0], capture_block_inputs(q, blocks[0], items))
    with float_mode(q):
        floated = run_block(q, blocks[0], capture_block_inputs(q, blocks[0], items))
    layers = {"q_proj": blocks[1].self_attn.q_proj, "down_proj": blocks[1].mlp.down_proj}
    sums, groups = {}, []

    def keep(members, got):  # (calibrates nothing: the block stays round to nearest, as the references)
        groups.append(sorted(members))
        sums.update(got)
        return []
    _, after = asymmetric_block(q, blocks[1], layers, quantized, floated, keep)
    assert groups == [["q_proj"], ["down_proj"]]  # in the order they run
    for short, full in (("q_proj", "model.layers.1.self_attn.q_proj"), ("down_proj", "model.layers.1.mlp.down_proj")):
        xf = _inputs_of(float_model, full, items)  # the float model's own inputs
        xq = _mxfp4_input(_inputs_of(q, full, items))  # the quantized model's, through the input quantizer
        m = sums[short].moments()
        n = xq.shape[0]
        assert m.tokens == n == 3 * 2 * 16
        scale = float(xf.abs().max()) ** 2
        torch.testing.assert_close(m.ff, xf.T @ xf / n, rtol=1e-5, atol=1e-6 * scale)
        torch.testing.assert_close(m.qf, xq.T @ xf / n, rtol=1e-5, atol=1e-6 * scale)
        torch.testing.assert_close(m.qq, xq.T @ xq / n, rtol=1e-5, atol=1e-6 * scale)
        assert float((m.qf - m.ff).abs().max()) > 1e-4 * scale  # the two passes differ: the test can see a swap
    want = []  # block 1's outputs in the float model
    handle = float_model.model.layers[1].register_forward_hook(lambda m, a, out: want.append(out[0] if isinstance(out, tuple) else out))
    with torch.no_grad():
        for x in items:
            float_model(x)
    handle.remove()
    for got, ref in zip(after, want):
        torch.testing.assert_close(got.args[0] if got.args else got.kwargs["hidden_states"], ref, rtol=1e-5, atol=1e-5)


def test_reported_objective_is_the_error_against_the_float_layer_on_float_inputs():
    torch.set_num_threads(1)
    float_model = llama(seed=2)
    items = _data(4, seed=3)
    q = gq.ptq(copy.deepcopy(float_model), items, recipe="mxfp4", methods=ASYM, quantize_head=False, progress=False)
    name = "model.layers.1.self_attn.q_proj"
    (report,) = [r for r in q.calibration_report if r.layer == name]
    w = float_model.get_submodule(name).weight.detach().double()
    stored = q.get_submodule(name).quant_weight().value.detach().double()
    xf = _inputs_of(float_model, name, items)
    xq = _mxfp4_input(_inputs_of(q, name, items))  # block 0 is calibrated: what the feed of block 1 saw
    direct = float(((xq @ stored.T - xf @ w.T) ** 2).sum() / (xq.shape[0] * w.shape[0]))
    assert abs(report.error_after - direct) <= 1e-4 * direct
    rtn = fake_quant(w.float(), "fp4_e2m1").double()
    assert report.error_before == pytest.approx(float(((xq @ rtn.T - xf @ w.T) ** 2).sum() / (xq.shape[0] * w.shape[0])),
                                                rel=1e-4)
    layer_reports = [r for r in q.calibration_report if r.method == "gptq"]
    assert len(layer_reports) == 14
    assert all(r.error_after <= r.error_before for r in layer_reports)  # never worse than round to nearest
    assert sum(r.error_after < 0.95 * r.error_before for r in layer_reports) >= 7


def test_equal_inputs_give_plain_gptq():
    """Weight only, block 0's q / k / v read the float model's own normed embeddings in both passes:
    the target ``W*`` is ``W`` and asymmetric GPTQ is GPTQ, bit for bit."""
    torch.set_num_threads(1)
    float_model = llama(seed=4)
    items = _data(3, seed=5)
    plain = gq.ptq(copy.deepcopy(float_model), items, recipe="mxfp4_weight_only", methods=["gptq"],
                   quantize_head=False, progress=False)
    asym = gq.ptq(copy.deepcopy(float_model), items, recipe="mxfp4_weight_only", methods=ASYM,
                  quantize_head=False, progress=False)
    for proj in ("q_proj", "k_proj", "v_proj"):
        name = f"model.layers.0.self_attn.{proj}"
        assert torch.equal(plain.get_submodule(name).weight, asym.get_submodule(name).weight)
    name = "model.layers.1.self_attn.q_proj"  # downstream of quantized weights: the target moves
    assert not torch.equal(plain.get_submodule(name).weight, asym.get_submodule(name).weight)


def test_a_non_bool_asymmetric_is_named_before_the_model_changes():
    model = llama()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(ValueError, match="gptq asymmetric must be True or False, got 'yes'"):
        gq.ptq(model, _data(1), recipe="mxfp4", methods={"smooth": {}, "gptq": {"asymmetric": "yes"}},
               quantize_head=False, progress=False)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_each_group_sees_the_groups_before_it_calibrated():
    """The calibrate step halves each group's weights: a layer's recorded x~ must then be its input
    in the model where every group before it is halved (the final model, since no layer's input
    depends on its own weight), and the groups come in the order the layers run."""
    torch.set_num_threads(1)
    float_model = llama(seed=6)
    q = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4", quantize_head=False)
    items = _data(2, seed=7)
    _, blocks = find_blocks(q)
    inputs = capture_block_inputs(q, blocks[0], items)
    with float_mode(q):
        floated = capture_block_inputs(q, blocks[0], items)
    names = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
             "mlp.up_proj", "mlp.down_proj"]
    layers = {n: blocks[0].get_submodule(n) for n in names}
    sums, groups = {}, []

    def halve(members, got):
        groups.append(sorted(members))
        sums.update(got)
        with torch.no_grad():
            for layer in members.values():
                layer.weight.mul_(0.5)
        return []
    asymmetric_block(q, blocks[0], layers, inputs, floated, halve)
    assert groups == [["self_attn.k_proj", "self_attn.q_proj", "self_attn.v_proj"], ["self_attn.o_proj"],
                      ["mlp.gate_proj", "mlp.up_proj"], ["mlp.down_proj"]]
    for n in names:
        xq = _mxfp4_input(_inputs_of(q, f"model.layers.0.{n}", items))
        xf = _inputs_of(float_model, f"model.layers.0.{n}", items)
        m = sums[n].moments()
        scale = float(xq.abs().max()) ** 2
        torch.testing.assert_close(m.qq, xq.T @ xq / xq.shape[0], rtol=1e-5, atol=1e-6 * scale)
        torch.testing.assert_close(m.qf, xq.T @ xf / xq.shape[0], rtol=1e-5, atol=1e-6 * scale)
