"""smooth_model: exact in float, the SmoothQuant scale, never worse on its objective, refusals."""
import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.smooth import smooth_model, smoothing_scale

transformers = pytest.importorskip("transformers")

from .test_rotate import IDS, disable_quant, tiny_llama  # noqa: E402


def outlier_llama(**kw):
    model = tiny_llama(**kw)
    with torch.no_grad():  # a few outlier features in the residual stream, as trained LLMs have
        model.model.embed_tokens.weight[:, 3] *= 20
        model.model.embed_tokens.weight[:, 40] *= 12
    return model


CALIB = [IDS[:, :8], IDS[:, 4:]]


@pytest.mark.parametrize("alpha", [None, 0.5, 0.0, 1.0])
@pytest.mark.parametrize("heads,kv", [(4, 2), (2, 2)])
def test_smoothed_model_equals_the_original_in_float(alpha, heads, kv):
    model = outlier_llama(heads=heads, kv_heads=kv)
    with torch.no_grad():
        ref = model(IDS).logits
    q = gq.quantize_model(copy.deepcopy(model), recipe="mxfp4", functional=False, exclude=["lm_head"])
    reports = smooth_model(q, CALIB, alpha=alpha, progress=False)
    assert len(reports) == 2 * 7
    with torch.no_grad():
        out = disable_quant(q)(IDS).logits
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_scale_is_smoothquants_formula():
    a = torch.tensor([4.0, 0.0, 9.0])
    w = torch.tensor([1.0, 2.0, 0.25])
    torch.testing.assert_close(smoothing_scale(a, w, 0.5), torch.tensor([2.0, 1.0, 6.0], dtype=torch.float64))
    torch.testing.assert_close(smoothing_scale(a, w, 1.0), a.double().where(a > 0, torch.ones(3, dtype=torch.float64)))


def test_search_never_worsens_the_objective_and_folds_into_the_norm():
    q = gq.quantize_model(outlier_llama(), recipe="mxfp4", functional=False, exclude=["lm_head"])
    norm_before = q.model.layers[0].input_layernorm.weight.detach().clone()
    reports = smooth_model(q, CALIB, progress=False)
    assert all(r.error_after <= r.error_before for r in reports)
    q_proj = next(r for r in reports if r.layer == "model.layers.0.self_attn.q_proj")
    assert q_proj.error_after < q_proj.error_before  # the outlier features are smoothed
    assert not torch.equal(q.model.layers[0].input_layernorm.weight, norm_before)


def test_bert_value_to_output_is_smoothed_exactly():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=128)
    model = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 64, (2, 10))
    with torch.no_grad():
        ref = model(ids).last_hidden_state
    q = gq.quantize_model(copy.deepcopy(model), recipe="mxfp4", functional=False)
    reports = smooth_model(q, [{"input_ids": ids}], alpha=0.5, progress=False)
    assert [r.layer for r in reports] == [f"encoder.layer.{i}.attention.output.dense" for i in (0, 1)]
    with torch.no_grad():
        torch.testing.assert_close(disable_quant(q)(ids).last_hidden_state, ref, rtol=1e-4, atol=1e-4)


def test_bad_input_is_named():
    q = gq.quantize_model(tiny_llama(), recipe="mxfp4", functional=False)
    with pytest.raises(ValueError, match="calibration_data is empty"):
        smooth_model(q, [], progress=False)
    with pytest.raises(ValueError, match="alpha must be a number in"):
        smooth_model(q, CALIB, alpha=1.5)
    with pytest.raises(TypeError, match="must be a tensor or a dict"):
        smooth_model(q, [[1, 2, 3]], progress=False)
    with pytest.raises(ValueError, match="no norm -> linear"):
        smooth_model(gq.quantize_model(torch.nn.Sequential(torch.nn.Linear(4, 4)), recipe="mxfp4"), [torch.ones(1, 4)])


def test_smooth_then_rotate_is_exact_and_rotated_layers_are_skipped():
    from groupquant.calib.rotate import rotate_model
    model = outlier_llama()
    with torch.no_grad():
        ref = model(IDS).logits
    q = gq.quantize_model(copy.deepcopy(model), recipe="mxfp4", functional=False, exclude=["lm_head"])
    smooth_model(q, CALIB, progress=False)
    rotate_model(q, fused_residual=True)
    reports = smooth_model(q, CALIB, progress=False)
    assert any("already rotated" in r.detail for r in reports)
    with torch.no_grad():
        torch.testing.assert_close(disable_quant(q)(IDS).logits, ref, rtol=1e-4, atol=1e-4)


# --- architectures checked by behaviour (issue 30: Gemma, Gemma2, StableLM, Phi-3, OPT) ---------------------------

from . import tiny_models as tm  # noqa: E402
from groupquant.calib.float_check import MethodRefused, Snapshot, check_unchanged, float_output  # noqa: E402


def _float_logits(model, ids):
    with torch.no_grad():
        return float_output(model, ids)


@pytest.mark.parametrize("make", [tm.gemma, tm.gemma2, tm.stablelm, tm.llama])
def test_smooth_keeps_the_float_function_of_each_architecture(make):
    model = make()
    ids = tm.ids()
    ref = _float_logits(model, ids)
    q = gq.quantize_model(copy.deepcopy(model), recipe="mxfp4", functional=False, quantize_head=False)
    reports = smooth_model(q, [ids], alpha=0.5, progress=False)
    torch.testing.assert_close(_float_logits(q, ids), ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))
    refused = {r.layer: r.detail for r in reports if "not smoothed" in r.detail}
    if make is tm.gemma:  # x * (1 + w): no norm group folds
        assert "does not scale with its weight" in refused["model.layers.0.self_attn.q_proj"]
    if make is tm.gemma2:  # post_attention_layernorm sits after attention, not before the MLP
        assert "not read model.layers.0.post_attention_layernorm's output" in refused["model.layers.0.mlp.up_proj"]
    if make in (tm.stablelm, tm.llama):  # every group folds, the LayerNorm's bias with its weight
        assert not refused


def test_stablelm_layernorm_bias_takes_the_scale():
    q = gq.quantize_model(tm.stablelm(), recipe="mxfp4", functional=False, quantize_head=False)
    norm = q.model.layers[0].input_layernorm
    w, b = norm.weight.detach().clone(), norm.bias.detach().clone()
    smooth_model(q, [tm.ids()], alpha=0.5, progress=False)
    torch.testing.assert_close(norm.bias / b, norm.weight / w)  # the same 1/s on both


def test_smooth_refusals_name_the_model_and_why():
    phi = gq.quantize_model(tm.phi3(), recipe="mxfp4", functional=False, quantize_head=False)
    with pytest.raises(MethodRefused, match=r"Phi3ForCausalLM.*fused projections: self_attn.qkv_proj"):
        smooth_model(phi, [tm.ids()], progress=False)
    opt = gq.quantize_model(tm.opt(), recipe="mxfp4", functional=False, quantize_head=False)
    with pytest.raises(MethodRefused, match="smooth_model on OPTForCausalLM: found no norm -> linear"):
        smooth_model(opt, [tm.ids()], progress=False)


def test_a_method_that_changes_the_float_function_is_undone_and_refused():
    model = tm.llama()
    ids = tm.ids()
    before = _float_logits(model, ids)
    snapshot = Snapshot(model)
    weight = model.model.layers[0].mlp.up_proj.weight
    with torch.no_grad():
        weight.mul_(1.5)  # a fold that does not cancel
    with pytest.raises(MethodRefused, match=r"'smoothing' would change the float function of this LlamaForCausalLM"):
        check_unchanged(model, ids, before, snapshot, "'smoothing'")
    assert model.model.layers[0].mlp.up_proj.weight is weight
    torch.testing.assert_close(_float_logits(model, ids), before, rtol=0, atol=0)
