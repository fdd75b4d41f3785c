"""Checkpoints of models with online rotations (groupquant.calib.rotate_model): refused where the
readers would not apply the rotation (compressed-tensors, GGUF), kept and re-applied where
groupquant reads them (safetensors, with or without a model), refused by name where the model
loaded into would not apply them."""
import copy

import pytest
import torch

import groupquant as gq
from groupquant.calib.rotate import rotate_model
from groupquant.export import CheckpointError

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")

IDS = torch.randint(0, 128, (1, 10), generator=torch.Generator().manual_seed(1))


def _rotated(tiny_llama, fused=False):
    """A tiny MXFP4 Llama rotated per layer (or with the fused residual rotation), and its float original."""
    float_model = tiny_llama()
    model = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4_weight_only", exclude=["lm_head"])
    rotate_model(model, fused_residual=fused, exclude=["lm_head"])
    return model, float_model


@pytest.mark.parametrize("fmt,name", [("compressed-tensors", "ckpt"), ("gguf", "m.gguf")])
def test_formats_other_readers_run_refuse_a_rotated_model(tmp_path, tiny_llama, fmt, name):
    pytest.importorskip({"compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    model, _ = _rotated(tiny_llama)
    with pytest.raises(CheckpointError, match=r"applies an online Hadamard rotation .* do not apply.*Calibrate "
                                              r"without 'rotate'.*format='safetensors'"):
        gq.save(model, tmp_path / name, format=fmt)
    assert not (tmp_path / name).exists()


def test_the_rotation_is_why(tmp_path, tiny_llama):
    """The same model unrotated writes; and a reader that ignores the rotation (the float twin fed
    the rotated weights, as transformers would) computes another function than the rotated model."""
    pytest.importorskip("compressed_tensors")
    model, float_model = _rotated(tiny_llama)
    plain = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4_weight_only", exclude=["lm_head"])
    gq.save(plain, tmp_path / "ckpt", format="compressed-tensors")
    unaware = copy.deepcopy(float_model)
    unaware.load_state_dict(model.state_dict(), strict=False)  # the rotated float weights, no rotation
    with torch.no_grad():
        assert (unaware(IDS).logits - model(IDS).logits).abs().max() > 1e-2


def test_load_without_a_model_gives_layers_with_their_rotation(tmp_path, tiny_llama):
    model, _ = _rotated(tiny_llama)
    loaded = gq.load(gq.save(model, tmp_path / "m.safetensors"))
    layer = loaded.layers["model.layers.0.mlp.down_proj"]
    assert layer.input_rotation.block_size == 32
    assert not any("input_rotation" in k for k in loaded.tensors)
    x = torch.randn(3, 128)
    with torch.no_grad():
        assert torch.allclose(layer(x), model.model.layers[0].mlp.down_proj(x), atol=1e-5, rtol=1e-5)


def test_fused_rotation_with_a_tied_head_reloads_into_a_model_rotated_the_same_way(tmp_path, tiny_llama):
    model, float_model = _rotated(tiny_llama, fused=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    path = gq.save(model, tmp_path / "m.safetensors")
    fresh = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4_weight_only", exclude=["lm_head"])
    for strict in (True, False):  # not the torch key errors, nor a silent load computing another function
        with pytest.raises(CheckpointError, match=r"holds an online rotation \(model\.norm\.(un)?rotate\.signs\) "
                                                  r"that the model does not apply.*fused_residual=True"):
            gq.load(path, fresh, strict=strict)
    rotate_model(fresh, fused_residual=True, exclude=["lm_head"], seed=5)  # any seed: the signs come from the file
    gq.load(path, fresh)
    with torch.no_grad():
        assert torch.equal(fresh(IDS).logits, model(IDS).logits)


def test_a_float_twin_does_not_take_a_rotated_checkpoint(tmp_path, tiny_llama):
    model, float_model = _rotated(tiny_llama)
    path = gq.save(model, tmp_path / "m.safetensors")
    with pytest.raises(CheckpointError, match=r"input_rotation\.block_size_\) that the model does not apply: "
                                              r"'model\.layers\.0\.\w+\.\w+' is Linear"):
        gq.load(path, copy.deepcopy(float_model), strict=False)
    quantized = gq.quantize_model(copy.deepcopy(float_model), recipe="mxfp4_weight_only", exclude=["lm_head"])
    gq.load(path, quantized)  # a quant layer re-creates its rotation
    with torch.no_grad():
        assert torch.equal(quantized(IDS).logits, model(IDS).logits)
