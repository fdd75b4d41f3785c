"""rotate_model: exact in float (per-layer and fused residual rotations), tied weights kept tied,
deterministic, clear refusals; the rotated model survives state_dict, pack_model."""
import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.rotate import rotate_model
from groupquant.nn.layers.input_rotation import InputRotation

transformers = pytest.importorskip("transformers")


def tiny_llama(tie=True, heads=4, kv_heads=2, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=heads, num_key_value_heads=kv_heads, tie_word_embeddings=tie)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so that folding them matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def disable_quant(model):
    """The model's quant layers computing in float (quantizers off), rotations kept."""
    for m in model.modules():
        for attr in ("input_quant", "weight_quant"):
            proxy = getattr(m, attr, None)
            if proxy is not None and hasattr(proxy, "tensor_quant"):
                proxy.tensor_quant = None
    return model


IDS = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tie,heads,kv", [(True, 4, 2), (False, 2, 2), (True, 2, 1)])
@pytest.mark.parametrize("recipe", ["mxfp4", "nvfp4"])
def test_rotated_model_equals_the_original_in_float(fused, tie, heads, kv, recipe):
    model = tiny_llama(tie, heads, kv)
    with torch.no_grad():
        ref = model(IDS).logits
    q = gq.quantize_model(copy.deepcopy(model), recipe=recipe, functional=False, exclude=["lm_head"])
    reports = rotate_model(q, fused_residual=fused, exclude=["lm_head"])
    assert {r.layer for r in reports} >= {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"}
    assert (q.lm_head.weight is q.model.embed_tokens.weight) == tie
    with torch.no_grad():
        out = disable_quant(q)(IDS).logits
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)


def test_per_layer_rotation_matches_the_quantizer_block():
    q = gq.quantize_model(tiny_llama(), recipe="nvfp4", functional=False, quantize_head=True)  # a quant head
    reports = {r.layer: r for r in rotate_model(q, exclude=["lm_head"])}
    assert q.model.layers[0].mlp.down_proj.input_rotation.block_size == 16  # NVFP4 blocks
    assert "excluded" in reports["lm_head"].detail and getattr(q.lm_head, "input_rotation", None) is None


def test_fused_residual_leaves_online_rotations_only_where_needed():
    q = gq.quantize_model(tiny_llama(heads=2, kv_heads=2), recipe="mxfp4", functional=False, exclude=["lm_head"])
    rotate_model(q, fused_residual=True, exclude=["lm_head"])
    layer = q.model.layers[0]
    online = {n for n, m in layer.named_modules() if isinstance(m, InputRotation)}
    assert online == {"mlp.down_proj.input_rotation"}  # head_dim 32: v -> o folded per head
    assert torch.equal(layer.input_layernorm.weight, torch.ones(64))


def test_rotation_lowers_the_activation_error_of_outlier_features():
    torch.manual_seed(0)
    layer = gq.nn.QuantLinear(128, 32, weight_quant=gq.quantizers.MXFloat4e2m1Weight,
                              input_quant=gq.quantizers.MXFloat4e2m1Act).eval()
    ref_layer = torch.nn.Linear(128, 32)
    ref_layer.load_state_dict({k: v for k, v in layer.state_dict().items() if k in ("weight", "bias")})
    x = torch.randn(256, 128)
    x[:, ::32] *= 30  # one outlier feature per block
    with torch.no_grad():
        ref = ref_layer(x)
        before = (layer(x) - ref).pow(2).mean()
        rotate_model(torch.nn.Sequential(layer))
        after = (layer(x) - ref).pow(2).mean()
    assert after < 0.8 * before


def test_deterministic_under_a_seed():
    base = gq.quantize_model(tiny_llama(tie=False), recipe="mxfp4", functional=False, exclude=["lm_head"])
    a, b, c = copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
    rotate_model(a, fused_residual=True, seed=1)
    rotate_model(b, fused_residual=True, seed=1)
    rotate_model(c, fused_residual=True, seed=2)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["model.embed_tokens.weight"], sc["model.embed_tokens.weight"])


def test_rotated_model_survives_state_dict_and_pack_model():
    q = gq.quantize_model(tiny_llama(tie=False), recipe="mxfp4", functional=False, exclude=["lm_head"])
    rotate_model(q, exclude=["lm_head"])
    fresh = gq.quantize_model(tiny_llama(tie=False, seed=5), recipe="mxfp4", functional=False, exclude=["lm_head"])
    fresh.load_state_dict(q.state_dict())
    with torch.no_grad():
        ref = q(IDS).logits
        assert torch.equal(fresh(IDS).logits, ref)
        packed = gq.pack_model(copy.deepcopy(q))
        torch.testing.assert_close(packed(IDS).logits, ref, rtol=1e-4, atol=1e-4)


def test_bert_fused_residual_is_refused_with_the_reason():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=64, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=128)
    q = gq.quantize_model(transformers.BertModel(cfg).eval(), recipe="mxfp4", functional=False)
    with pytest.raises(ValueError, match="post-LayerNorm"):
        rotate_model(q, fused_residual=True)
    rotate_model(q)  # per-layer rotations apply


def test_bad_input_is_named():
    q = gq.quantize_model(tiny_llama(), recipe="mxfp4", functional=False)
    with pytest.raises(ValueError, match="exclude='nothing' matches no module"):
        rotate_model(q, exclude="nothing")
    with pytest.raises(ValueError, match="no QuantLinear"):
        rotate_model(tiny_llama())
    with pytest.raises(TypeError, match="fused_residual"):
        rotate_model(q, fused_residual="yes")


def test_fused_residual_refuses_gemma_before_changing_it():
    from groupquant.calib.float_check import MethodRefused
    from . import tiny_models as tm
    q = gq.quantize_model(tm.gemma(), recipe="mxfp4", functional=False, quantize_head=False)
    state = {k: v.clone() for k, v in q.state_dict().items()}
    why = r".*input_layernorm \(GemmaRMSNorm\)'s output does not scale with its weight"
    with pytest.raises(MethodRefused, match=r"rotate_model\(fused_residual=True\) on GemmaForCausalLM: " + why):
        rotate_model(q, fused_residual=True)
    after = q.state_dict()
    assert after.keys() == state.keys() and all(torch.equal(after[k], state[k]) for k in state)
    assert not any(isinstance(m, InputRotation) for m in q.modules())


def test_fused_residual_refuses_fused_projections_and_layernorms():
    from . import tiny_models as tm
    for make, why in ((tm.phi3, "fused projections: self_attn.qkv_proj"),
                      (tm.stablelm, "does not commute with a rotation")):
        q = gq.quantize_model(make(), recipe="mxfp4", functional=False, quantize_head=False)
        with pytest.raises(ValueError, match=why):
            rotate_model(q, fused_residual=True)
