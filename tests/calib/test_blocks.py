"""The block runner: calibration without a key / value cache (token-id tensors and dicts alike, eager
and sdpa attention), every stack of blocks (T5's encoder and decoder), replay checked against the
model, non-finite data named."""
from __future__ import annotations

import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.blocks import (capture_block_inputs, check_calibration_data, find_stacks, replay_is_faithful,
                                     run_block)

from . import tiny_models as tm


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_token_id_tensor_items_replay_the_models_hidden_states(attn) -> None:
    model = tm.llama()
    model.config._attn_implementation = attn
    ids = tm.ids()
    with torch.no_grad():
        ref = model(ids, output_hidden_states=True).hidden_states
    (_, blocks), = find_stacks(model)
    inputs = capture_block_inputs(model, blocks[0], [ids])
    assert not any(type(v).__name__.endswith("Cache") for v in inputs[0].kwargs.values())  # no cache object kept
    for index, block in enumerate(blocks):
        inputs = run_block(model, block, inputs)
        if index + 1 < len(blocks):
            torch.testing.assert_close(inputs[0].args[0], ref[index + 1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_tensor_and_dict_items_calibrate_the_same_weights(attn) -> None:
    data = [tm.ids(seed=s) for s in (1, 2)]
    models = []
    for items in (data, [{"input_ids": d} for d in data]):
        model = tm.llama()
        model.config._attn_implementation = attn
        models.append(gq.ptq(model, items, recipe="mxfp4_weight_only", methods=["gptq"], quantize_head=False,
                             progress=False))
    a, b = (m.state_dict() for m in models)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_t5_calibrates_the_encoder_and_the_decoder_stacks() -> None:
    model = tm.t5()
    ids = tm.ids()
    item = {"input_ids": ids, "decoder_input_ids": ids[:, :6]}
    assert [name for name, _ in find_stacks(model)] == ["encoder.block", "decoder.block"]
    out = gq.ptq(model, [item], recipe="mxfp4_weight_only", methods=["gptq"], quantize_head=False, progress=False)
    layers = {r.layer for r in out.calibration_report if r.method == "gptq"}
    for stack in ("encoder", "decoder"):
        for block in (0, 1):
            assert f"{stack}.block.{block}.layer.0.SelfAttention.q" in layers
    assert {"decoder.block.1.layer.1.EncDecAttention.o", "decoder.block.0.layer.2.DenseReluDense.wo"} <= layers


def test_replay_is_checked_against_the_model() -> None:
    # T5 hands the first block's position bias to the next ones: a replay is not the model
    model = tm.t5()
    ids = tm.ids()
    item = {"input_ids": ids, "decoder_input_ids": ids[:, :6]}
    _, encoder = find_stacks(model)[0]
    first = capture_block_inputs(model, encoder[0], [item])[0]
    assert not replay_is_faithful(model, encoder, item, first)
    llama = tm.llama()
    _, blocks = find_stacks(llama)[0]
    first = capture_block_inputs(llama, blocks[0], [tm.ids()])[0]
    assert replay_is_faithful(llama, blocks, tm.ids(), first)


def test_t5_decoder_is_calibrated_on_the_inputs_the_model_gives_it() -> None:
    # the decoder's second block is calibrated on what the model hands it (the first block's position
    # bias included): its round-to-nearest error in the report is the one under H of the model's own
    # activations at that layer (which depend only on the stacks and blocks calibrated before it)
    model = tm.t5()
    ids = tm.ids()
    item = {"input_ids": ids, "decoder_input_ids": ids[:, :6]}
    w = model.decoder.block[1].layer[0].SelfAttention.q.weight.detach().double().clone()
    out = gq.ptq(model, [item], recipe="mxfp4_weight_only", methods=["gptq"], quantize_head=False, progress=False)
    layer = out.decoder.block[1].layer[0].SelfAttention.q
    seen = []
    handle = layer.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().double()))
    with torch.no_grad():
        out(**item)
    handle.remove()
    x = seen[0].reshape(-1, seen[0].shape[-1])
    h = x.T @ x / x.shape[0]
    rtn = layer.weight_quant.quant_value(w.float()).double()
    expected = float(((w - rtn) @ h * (w - rtn)).sum() / w.shape[0])
    (report,) = [r for r in out.calibration_report if r.layer == "decoder.block.1.layer.0.SelfAttention.q"]
    assert report.error_before == pytest.approx(expected, rel=1e-6)


def test_non_finite_calibration_data_is_named() -> None:
    with pytest.raises(ValueError, match=r"calibration_data item 1 \['x'\] holds 1 non-finite value"):
        check_calibration_data([{"x": torch.ones(2, 3)}, {"x": torch.tensor([[1.0, float("nan")]])}])
    with pytest.raises(ValueError, match="item 0 holds 2 non-finite"):
        gq.ptq(torch.nn.Sequential(torch.nn.Linear(4, 4)), [torch.tensor([[1.0, float("inf"), -float("inf"), 0.0]])],
               recipe="mxfp4_weight_only", progress=False)


class _Overflow(torch.nn.Module):
    def forward(self, x):
        return x * torch.where(x > 0, torch.tensor(float("inf")), torch.tensor(1.0))


def test_non_finite_activations_name_the_layer() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), _Overflow(), torch.nn.Linear(64, 8))
    for methods in (["scale_search"], ["gptq"]):
        with pytest.raises(ValueError, match=r"inputs of layer '2' hold NaN / Inf in \d+ of 8 calibration tokens"):
            gq.ptq(copy.deepcopy(model), [torch.randn(8, 64)], recipe="mxfp4_weight_only", methods=methods,
                   progress=False)


class _TwoStacks(torch.nn.Module):
    """A model with a stack of blocks its forward never runs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.used = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64)) for _ in range(2)])
        self.unused = torch.nn.ModuleList([torch.nn.Sequential(torch.nn.Linear(64, 64)) for _ in range(3)])

    def forward(self, x):
        for block in self.used:
            x = block(x)
        return x


def test_a_stack_the_forward_never_runs_is_reported_not_fatal() -> None:
    out = gq.ptq(_TwoStacks(), [torch.randn(8, 64)], recipe="mxfp4_weight_only", methods=["gptq"], progress=False)
    reports = {r.layer: r.detail for r in out.calibration_report}
    assert "skipped" not in reports["used.1.0"]
    assert reports["unused.2.0"] == "skipped: the model's forward on the calibration data never runs unused"
