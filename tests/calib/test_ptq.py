"""groupquant.ptq: the block-by-block runner on tiny Llama / BERT / plain models, reports,
determinism, bad input."""
from __future__ import annotations

import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.blocks import capture_block_inputs, find_blocks, run_block

transformers = pytest.importorskip("transformers")


def tiny_llama(seed: int = 0):
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(seed)
    return transformers.LlamaForCausalLM(cfg).eval()


def tiny_bert(seed: int = 0):
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  vocab_size=100, max_position_embeddings=64)
    torch.manual_seed(seed)
    return transformers.BertModel(cfg).eval()


def token_data(n: int = 2, seq: int = 16, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 100, (2, seq), generator=g) for _ in range(n)]


@pytest.mark.parametrize("make", [tiny_llama, tiny_bert])
def test_block_runner_reproduces_the_models_hidden_states(make) -> None:
    model = make()
    ids = token_data(1)[0]
    mask = torch.ones_like(ids)
    mask[1, -4:] = 0  # padding: the attention mask must reach every block
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    _, blocks = find_blocks(model)
    inputs = capture_block_inputs(model, blocks[0], [{"input_ids": ids, "attention_mask": mask}])
    assert torch.equal(inputs[0].args[0] if inputs[0].args else inputs[0].kwargs["hidden_states"], ref[0])
    for index, block in enumerate(blocks):
        inputs = run_block(model, block, inputs)
        got = inputs[0].args[0] if inputs[0].args else inputs[0].kwargs["hidden_states"]
        if index + 1 < len(blocks):  # the last hidden state of Llama is after the final norm
            torch.testing.assert_close(got, ref[index + 1], rtol=0, atol=1e-6)


def test_find_blocks_names_the_layer_lists() -> None:
    assert find_blocks(tiny_llama())[0] == "model.layers"
    assert find_blocks(tiny_bert())[0] == "encoder.layer"
    assert find_blocks(torch.nn.Sequential(torch.nn.Linear(4, 4))) is None


@pytest.mark.parametrize("recipe_name", ["mxfp4_weight_only", "nvfp4", "mxfp8"])
def test_ptq_llama_reports_every_layer_and_method(recipe_name: str) -> None:
    model = gq.ptq(tiny_llama(), token_data(), recipe=recipe_name, methods=["gptq", "scale_search"],
                   exclude=["lm_head"], progress=False)
    reports = model.calibration_report
    linears = [n for n, m in model.named_modules() if isinstance(m, gq.nn.QuantLinear)]
    assert "lm_head" not in linears and len(linears) == 14
    assert [(r.layer, r.method) for r in reports] == [(n, m) for n in linears for m in ("scale_search", "gptq")]
    for r in reports:
        assert r.error_after <= r.error_before or "kept round to nearest" in r.detail or r.method == "gptq"
    # each layer's final weight is never worse than round to nearest on its own objective
    finals = {}
    for r in reports:
        finals.setdefault(r.layer, []).append(r)
    for layer_reports in finals.values():
        assert min(x.error_after for x in layer_reports) <= layer_reports[0].error_before


def test_ptq_changes_weights_and_improves_over_rtn_on_outputs() -> None:
    data = token_data(4, 32)
    float_model = tiny_llama()
    rtn = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4_weight_only", exclude=["lm_head"])
    cal = gq.ptq(copy.deepcopy(float_model), data, recipe="mxfp4_weight_only", methods="gptq", exclude=["lm_head"],
                 progress=False)
    with torch.no_grad():
        ref = torch.cat([float_model(d).logits for d in data])
        err_rtn = (torch.cat([rtn(d).logits for d in data]) - ref).pow(2).mean()
        err_cal = (torch.cat([cal(d).logits for d in data]) - ref).pow(2).mean()
    assert err_cal < err_rtn


def test_ptq_is_deterministic_and_leaves_global_rng_alone() -> None:
    model, data = tiny_llama(), token_data()
    state = torch.random.get_rng_state()
    a = gq.ptq(model, data, recipe="nvfp4_weight_only", exclude=["lm_head"], progress=False)
    assert torch.equal(torch.random.get_rng_state(), state)
    b = gq.ptq(tiny_llama(), token_data(), recipe="nvfp4_weight_only", exclude=["lm_head"], progress=False)
    for (ka, va), (kb, vb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert ka == kb and torch.equal(va, vb)


def test_ptq_state_dict_round_trip_is_bit_exact() -> None:
    data = token_data()
    cal = gq.ptq(tiny_llama(), data, recipe="mxfp4", exclude=["lm_head"], progress=False)
    fresh = gq.quantize_model(tiny_llama(seed=3), recipe="mxfp4", exclude=["lm_head"])
    fresh.load_state_dict(cal.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(data[0]).logits, cal(data[0]).logits)


def test_ptq_bert_and_plain_model() -> None:
    model = gq.ptq(tiny_bert(), [{"input_ids": d} for d in token_data()], recipe="mxfp4_weight_only",
                   methods=["scale_search", "gptq"], progress=False)
    # 2 blocks x 6 linears x (scale_search, gptq), then the pooler (outside the blocks) on the whole forward
    assert len(model.calibration_report) == 26 and model.calibration_report[-1].layer == "pooler.dense"
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    out = gq.ptq(mlp, [torch.randn(4, 64) for _ in range(3)], recipe="mxfp4_weight_only", methods="gptq",
                 progress=False)
    assert [r.layer for r in out.calibration_report] == ["0", "2"]


def test_ptq_skips_layers_it_cannot_calibrate_and_says_why() -> None:
    mlp = torch.nn.Sequential(torch.nn.Conv1d(4, 4, 1), torch.nn.Flatten(), torch.nn.Linear(64, 32))
    out = gq.ptq(mlp, [torch.randn(2, 4, 16)], recipe="mxfp4_weight_only", methods="gptq", progress=False)
    assert [r.layer for r in out.calibration_report] == ["2"]  # the conv is converted, not calibrated


def test_ptq_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="calibration_data is empty"):
        gq.ptq(tiny_llama(), [], recipe="mxfp4")
    with pytest.raises(TypeError, match="single Tensor"):
        gq.ptq(tiny_llama(), torch.zeros(2, 3, dtype=torch.long), recipe="mxfp4")
    with pytest.raises(TypeError, match="item 1 must be a tensor or a dict"):
        gq.ptq(tiny_llama(), [torch.zeros(1, 3, dtype=torch.long), "text"], recipe="mxfp4")
    with pytest.raises(ValueError, match=r"calibration_data item 0 \(tensor of shape \(2, 8, 5\)\) does not fit"):
        gq.ptq(tiny_llama(), [torch.zeros(2, 8, 5)], recipe="mxfp4", progress=False)
    with pytest.raises(ValueError, match="unknown calibration method 'gtpq'"):
        gq.ptq(tiny_llama(), token_data(), recipe="mxfp4", methods=["gtpq"])
    with pytest.raises(ValueError, match="'gptq' has no option 'damp'"):
        gq.ptq(tiny_llama(), token_data(), recipe="mxfp4", methods={"gptq": {"damp": 0.1}})


def test_ptq_progress_prints_the_report_table(capsys) -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8))
    gq.ptq(mlp, [torch.randn(4, 64)], recipe="nvfp4_weight_only", methods="scale_search", progress=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["layer", "method", "before", "after"]
    assert [line.split()[:2] for line in lines[1:]] == [["0", "scale_search"], ["2", "scale_search"]]


class _TiedLM(torch.nn.Module):
    """A model without repeated blocks (calibrated as one unit) whose output head is tied to its embedding."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(100, 64)
        self.body = torch.nn.Linear(64, 64)
        self.head = torch.nn.Linear(64, 100, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.body(self.embed(ids))))


def test_a_quantized_tied_head_is_not_calibrated_so_the_embedding_keeps_its_values() -> None:
    model = _TiedLM().eval()
    emb = model.embed.weight.detach().clone()
    body = model.body.weight.detach().clone()
    model = gq.ptq(model, token_data(), recipe="mxfp4_weight_only", methods=["gptq"], quantize_head=True,
                   progress=False)
    assert isinstance(model.head, gq.nn.QuantLinear) and model.head.weight is model.embed.weight
    assert torch.equal(model.embed.weight, emb)
    assert not torch.equal(model.body.weight, body)  # the other layer was calibrated
    (report,) = [r for r in model.calibration_report if r.layer == "head"]
    assert report.detail.startswith("skipped: weight tied to embed")


# --- issue 30: defaults that do not apply, refusals before any change, every layer reported -------------------------

from . import tiny_models as tm  # noqa: E402
from groupquant.calib.float_check import MethodRefused  # noqa: E402


@pytest.mark.parametrize("make", [tm.opt, tm.gpt_neox, tm.olmo2, tm.phi3])
def test_default_smooth_that_does_not_apply_is_skipped_and_reported(make) -> None:
    model = gq.ptq(make(), [tm.ids()], recipe="mxfp4", quantize_head=False, progress=False)
    (skip,) = [r for r in model.calibration_report if r.method == "smooth"]
    assert skip.layer == "(model)" and skip.detail.startswith(f"skipped (a default that does not apply to "
                                                               f"{type(model).__name__})")
    assert any(r.method == "gptq" for r in model.calibration_report)


def test_default_methods_on_a_plain_mlp() -> None:
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    out = gq.ptq(mlp, [torch.randn(8, 64)], recipe="mxfp4", progress=False)
    assert [r.layer for r in out.calibration_report if r.method == "smooth"] == ["(model)"]
    assert [r.layer for r in out.calibration_report if r.method == "gptq"] == ["0", "2"]


@pytest.mark.parametrize("methods,make,why", [
    (["smooth", "gptq"], tm.opt, "found no norm -> linear"),
    (["smooth"], tm.phi3, r"fused projections: self_attn.qkv_proj"),
    ({"rotate": {"fused_residual": True}}, tm.gemma, "does not scale with its weight"),
])
def test_a_named_method_that_cannot_apply_is_refused_before_anything_changes(methods, make, why) -> None:
    model = make().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(MethodRefused, match=f"does not apply to {type(model).__name__}: .*{why}"):
        gq.ptq(model, [tm.ids()], recipe="mxfp4", methods=methods, quantize_head=False, progress=False)
    assert model.training and not any(isinstance(m, gq.nn.QuantLinear) for m in model.modules())
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())


def test_gpt2_conv1d_model_is_refused_with_the_reason() -> None:
    model = tm.gpt2()
    with pytest.raises(ValueError, match=r"ptq: converted no layer of GPT2LMHeadModel: .*Conv1D x 8"):
        gq.ptq(model, [tm.ids()], recipe="mxfp4", quantize_head=False, progress=False)
    assert "_groupquant_functional" not in model.__dict__  # left as it came
    with pytest.raises(ValueError, match=r"ptq: converted no layer of Sequential: it has no nn.Linear"):
        gq.ptq(torch.nn.Sequential(torch.nn.ReLU()), [torch.randn(2, 4)], recipe="mxfp4", progress=False)


def test_quantized_tied_head_is_in_the_report_of_a_block_model() -> None:
    model = gq.ptq(tm.llama(tie_word_embeddings=True), [tm.ids()], recipe="mxfp4_weight_only", methods=["gptq"],
                   quantize_head=True, progress=False)
    assert isinstance(model.lm_head, gq.nn.QuantLinear)
    (head,) = [r for r in model.calibration_report if r.layer == "lm_head"]
    assert head.detail.startswith("skipped: weight tied to model.embed_tokens")


def test_an_untied_quantized_head_is_calibrated_after_the_blocks() -> None:
    model = gq.ptq(tm.llama(tie_word_embeddings=False), [tm.ids()], recipe="mxfp4_weight_only", methods=["gptq"],
                   quantize_head=True, progress=False)
    assert model.calibration_report[-1].layer == "lm_head" and model.calibration_report[-1].method == "gptq"
