"""The output-head rule of quantize_model / ptq: a language model's head (tied to the embeddings or
``get_output_embeddings()``) stays float by default with one notice line, ``quantize_head=True`` or
an ``include`` naming it quantizes it, ``exclude`` wins, and a tied head stays tied."""
import copy
import logging

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import QuantLinear

transformers = pytest.importorskip("transformers")

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def tiny_llama(tie=True, layers=2, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64,
                                   tie_word_embeddings=tie)
    return transformers.LlamaForCausalLM(cfg).eval()


def notices(text):
    return [line for line in text.splitlines() if "kept the output head" in line]


def quant_names(model):
    return sorted(n for n, m in model.named_modules() if isinstance(m, QuantLinear))


@pytest.mark.parametrize("tie", [True, False])
def test_head_stays_float_by_default_with_one_line(tie, capsys):
    model = tiny_llama(tie)
    gq.quantize_model(model, recipe="mxfp4")
    lines = notices(capsys.readouterr().err)
    assert len(lines) == 1 and "'lm_head'" in lines[0] and "quantize_head=True" in lines[0]
    assert ("tied to model.embed_tokens.weight" in lines[0]) == tie
    assert type(model.lm_head) is nn.Linear
    assert quant_names(model) == sorted(f"model.layers.{i}.{kind}.{p}" for i in range(2)
                                        for kind, ps in (("self_attn", PROJECTIONS[:4]), ("mlp", PROJECTIONS[4:]))
                                        for p in ps)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie


def test_float_head_logits_are_the_float_product_of_the_quantized_body():
    model = gq.quantize_model(tiny_llama(), recipe="mxfp4", quantize_head=False)
    seen = {}
    model.model.norm.register_forward_hook(lambda m, i, o: seen.update(h=o))
    ids = torch.tensor([[1, 5, 9, 63]])
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.equal(logits, F.linear(seen["h"], model.model.embed_tokens.weight))


@pytest.mark.parametrize("tie", [True, False])
def test_quantize_head_true_quantizes_it_and_keeps_it_tied(tie, capsys):
    model = tiny_llama(tie)
    emb = model.model.embed_tokens.weight.detach().clone()
    gq.quantize_model(model, recipe="mxfp4_weight_only", quantize_head=True)
    assert not notices(capsys.readouterr().err)
    assert isinstance(model.lm_head, QuantLinear)
    assert (model.lm_head.weight is model.model.embed_tokens.weight) == tie
    assert torch.equal(model.model.embed_tokens.weight, emb)  # the embedding keeps its float values
    x = torch.randn(3, 32)
    w = gq.fake_quant(model.lm_head.weight.detach(), "fp4_e2m1", 32)
    with torch.no_grad():
        assert torch.equal(model.lm_head(x), F.linear(x, w))


@pytest.mark.parametrize("selection, head_quantized", [
    ({"include": ["lm_head"]}, True), ({"include": "*"}, True), ({"include": ["*proj"]}, False),
    ({"exclude": ["lm_head"]}, False), ({"quantize_head": False}, False),
    ({"quantize_head": True, "exclude": "lm_head"}, False)])
def test_patterns_and_switch_agree_without_a_notice(selection, head_quantized, capsys):
    model = gq.quantize_model(tiny_llama(), recipe="mxfp4_weight_only", **selection)
    assert isinstance(model.lm_head, QuantLinear) == head_quantized
    assert not notices(capsys.readouterr().err)


def test_tied_head_of_any_model_is_found_by_its_weight(capsys):
    class TinyLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(40, 32)
            self.body = nn.Linear(32, 32)
            self.out = nn.Linear(32, 40, bias=False)
            self.out.weight = self.embed.weight

    model = gq.quantize_model(TinyLM(), weight_quant=gq.quantizers.MXFloat4e2m1Weight)
    assert isinstance(model.body, QuantLinear) and type(model.out) is nn.Linear
    assert model.out.weight is model.embed.weight
    (line,) = notices(capsys.readouterr().err)
    assert "'out' (tied to embed.weight)" in line


def test_the_notice_goes_to_logging_when_it_is_shown(caplog, capsys):
    with caplog.at_level(logging.INFO, logger="groupquant.nn.output_head"):
        gq.quantize_model(tiny_llama(), recipe="mxfp8")
    records = [r for r in caplog.records if "kept the output head" in r.getMessage()]
    assert len(records) == 1 and records[0].levelno == logging.INFO
    assert not notices(capsys.readouterr().err)  # shown once: by logging, not printed as well


def test_quantize_head_must_be_a_bool_or_none():
    with pytest.raises(TypeError, match=r"quantize_model\(quantize_head=...\).*got 'yes'"):
        gq.quantize_model(tiny_llama(), recipe="mxfp4", quantize_head="yes")
    with pytest.raises(TypeError, match=r"ptq\(quantize_head=...\)"):
        gq.ptq(tiny_llama(), [torch.tensor([[1, 2, 3]])], recipe="mxfp4", quantize_head=1)


def test_ptq_keeps_the_head_float_and_a_quantized_tied_head_tied_with_float_embeddings(capsys):
    data = [torch.randint(0, 64, (1, 32), generator=torch.Generator().manual_seed(i)) for i in range(2)]
    model = gq.ptq(tiny_llama(), data, recipe="mxfp4_weight_only", methods=["gptq"], progress=False)
    assert type(model.lm_head) is nn.Linear and len(notices(capsys.readouterr().err)) == 1
    float_model = tiny_llama()
    emb = float_model.model.embed_tokens.weight.detach().clone()
    model = gq.ptq(copy.deepcopy(float_model), data, recipe="mxfp4", methods=["smooth", "scale_search", "gptq"],
                   quantize_head=True, progress=False)
    assert isinstance(model.lm_head, QuantLinear) and model.lm_head.weight is model.model.embed_tokens.weight
    assert torch.equal(model.model.embed_tokens.weight, emb)  # calibration did not rewrite the shared weight
