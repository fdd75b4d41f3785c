"""correct_upstream on a tiny Llama: every layer at least as good as round to nearest on its
objective, and the quantized model's logits on held-out tokens closer to the float model's than round to
nearest's. (Against GPTQ alone, ptq(methods=["gptq"]), it is mixed on this random model: 2% worse
on these held-out tokens, 12% better with 32 calibration items on others; not a default.)"""
from __future__ import annotations

import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.upstream_correction import correct_upstream

transformers = pytest.importorskip("transformers")


def _tiny(layers: int = 2):
    cfg = transformers.LlamaConfig(num_hidden_layers=layers, hidden_size=64, intermediate_size=128,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                   max_position_embeddings=64)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def _data(n: int = 4):
    g = torch.Generator().manual_seed(1)
    return [torch.randint(0, 100, (2, 32), generator=g) for _ in range(n)]


def test_correction_is_never_worse_than_round_to_nearest_and_brings_logits_closer():
    torch.set_num_threads(1)
    float_model = _tiny()
    data = _data(16)
    rtn = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4", quantize_head=False)
    corrected = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4", quantize_head=False)
    reports = correct_upstream(corrected, float_model, data)
    assert len(reports) == 14
    assert all(r.error_after <= r.error_before for r in reports)
    assert sum("not worse" not in r.detail for r in reports) > 7  # most layers take the correction
    test = _data(20)[16:]  # held out
    with torch.no_grad():
        def err(model):
            return sum(float((model(x).logits - float_model(x).logits).square().mean()) for x in test)
        assert err(corrected) < 0.9 * err(rtn)


def test_models_of_other_shapes_are_refused():
    with pytest.raises(ValueError, match="the quantized model has 2 blocks and the float model 1"):
        correct_upstream(gq.quantize_model(_tiny(2), recipe="mxfp4", quantize_head=False), _tiny(1), _data(1))


@pytest.mark.parametrize("methods, said", [(["rotate"], "carries an online input rotation"),
                                           ({"rotate": {"fused_residual": True}}, "carries an online input rotation"),
                                           (["smooth"], "ptq ran smooth")])
def test_rotated_or_smoothed_models_are_refused(methods, said):
    """Their layers act on inputs in another basis or scale than the float model's: the fit's
    round to nearest and ridge (both of the float weight) would be of the wrong weight."""
    float_model = _tiny()
    q = gq.ptq(copy.deepcopy(float_model), _data(2), recipe="mxfp4", methods=methods, quantize_head=False,
               progress=False)
    before = {n: p.detach().clone() for n, p in q.named_parameters()}
    with pytest.raises(ValueError, match=said):
        correct_upstream(q, float_model, _data(2))
    assert all(torch.equal(p, before[n]) for n, p in q.named_parameters())  # refused before any change


def test_a_model_calibrated_without_a_change_of_basis_is_corrected():
    float_model = _tiny()
    q = gq.ptq(copy.deepcopy(float_model), _data(2), recipe="mxfp4", methods=["gptq"], quantize_head=False,
               progress=False)
    assert len(correct_upstream(q, float_model, _data(2))) == 14
