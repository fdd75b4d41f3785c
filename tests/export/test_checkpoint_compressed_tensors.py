"""compressed-tensors checkpoints: the compressed-tensors package's own config model and decompressors
decode what groupquant writes to groupquant's dequantized weights, bit for bit."""
import json
import warnings

import pytest
import torch
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import CheckpointError, PackError, pack_model

ct = pytest.importorskip("compressed_tensors", reason="the compressed-tensors checkpoint tests need compressed-tensors")
st = pytest.importorskip("safetensors.torch", reason="the compressed-tensors checkpoint tests need safetensors")


def decompressed_by_the_package(path):
    """``layer name -> weight`` as compressed-tensors decodes it (its QuantizationConfig and compressor registry)."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    with open(path / "config.json") as f:
        qc = QuantizationConfig.model_validate(json.load(f)["quantization_config"])
    tensors = st.load_file(str(path / "model.safetensors"))
    out = {}
    for scheme in qc.config_groups.values():
        compressor = BaseCompressor.get_value_from_registry(scheme.format)
        for name in scheme.targets:
            own = {k[len(name) + 1:]: v for k, v in tensors.items()
                   if k.startswith(f"{name}.weight_") and k.count(".") == name.count(".") + 1}
            out[name] = compressor.decompress(own, scheme)["weight"]
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_package_decodes_mxfp4_and_nvfp4_exactly(tmp_path, linear_stack, dtype):
    model = linear_stack([Q.MXFloat4e2m1Weight, Q.NVFP4Weight, Q.NVFP4Weight], dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no layer decodes one bfloat16 step away
        gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    got = decompressed_by_the_package(tmp_path / "ckpt")
    assert set(got) == {"0", "2", "4"}
    for name, w in got.items():
        want = model[int(name)].group_quantized_weight().dequantize()
        # compressed-tensors decompresses FP4 to bfloat16: MXFP4 values are bfloat16 numbers (exact
        # in any dtype); NVFP4 ones are groupquant's weights rounded to bfloat16
        assert w.dtype == torch.bfloat16
        assert torch.equal(w, want.to(torch.bfloat16))
        if name == "0" or dtype == torch.bfloat16:
            assert torch.equal(w.to(dtype), want)


def test_config_is_what_compressed_tensors_writes(tmp_path, tiny_llama):
    model = tiny_llama(Q.NVFP4Weight)
    gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    with open(tmp_path / "ckpt" / "config.json") as f:
        config = json.load(f)
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    qc = config["quantization_config"]
    assert qc["quant_method"] == "compressed-tensors" and qc["format"] == "nvfp4-pack-quantized"
    assert qc["quantization_status"] == "compressed" and qc["version"] == ct.__version__
    (group,) = qc["config_groups"].values()
    assert group["weights"]["group_size"] == 16 and group["weights"]["strategy"] == "tensor_group"
    assert len(group["targets"]) == 14 and "model.layers.0.self_attn.q_proj" in group["targets"]
    tensors = st.load_file(str(tmp_path / "ckpt" / "model.safetensors"))
    assert tensors["model.layers.0.mlp.down_proj.weight_packed"].shape == (64, 64)
    assert tensors["model.layers.0.mlp.down_proj.weight_scale"].dtype == torch.float8_e4m3fn
    assert tensors["model.layers.0.mlp.down_proj.weight_global_scale"].shape == (1,)
    assert "lm_head.weight" not in tensors and "model.embed_tokens.weight" in tensors  # tied: once


def test_read_back_into_packed_layers_and_models(tmp_path, tiny_llama):
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    loaded = gq.load(tmp_path / "ckpt")
    assert loaded.format == "compressed-tensors" and len(loaded.layers) == 14
    q_proj = model.model.layers[1].self_attn.q_proj
    assert torch.equal(loaded.layers["model.layers.1.self_attn.q_proj"].dequantized_weight(),
                       q_proj.group_quantized_weight().dequantize())
    twin = tiny_llama()
    gq.load(tmp_path / "ckpt", twin)
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    ids = torch.randint(0, 128, (1, 8))
    packed = pack_model(tiny_llama(Q.MXFloat4e2m1Weight))
    gq.load(tmp_path / "ckpt", packed)
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, model(ids).logits)
        assert torch.allclose(packed(ids).logits, model(ids).logits, atol=1e-4, rtol=1e-4)


def test_nvfp4_tensor_scale_read_back_exactly(tmp_path, linear_stack):
    model = linear_stack([Q.NVFP4Weight])
    gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    loaded = gq.load(tmp_path / "ckpt")
    want = model[0].group_quantized_weight()
    got = loaded.layers["0"].group_quantized_weight()
    assert torch.equal(got.tensor_scale, want.tensor_scale) and torch.equal(got.codes, want.codes)


@pytest.mark.parametrize("wq", [Q.MXFloat6e2m3Weight, Q.MXFloat8e4m3Weight, Q.MXInt8Weight], ids=lambda q: q.__name__)
def test_formats_it_cannot_hold_are_refused_by_layer(tmp_path, linear_stack, wq):
    model = linear_stack([Q.MXFloat4e2m1Weight, wq])
    with pytest.raises(CheckpointError, match=r"^2: compressed-tensors checkpoints hold NVFP4 .* MXFP4 .*"
                                              + model[2].group_quantized_weight().fmt.name):
        gq.save(model, tmp_path / "ckpt", format="compressed-tensors")


def test_checkpoint_of_another_format_refused_by_layer(tmp_path, linear_stack):
    gq.save(linear_stack([Q.NVFP4Weight]), tmp_path / "ckpt", format="compressed-tensors")
    with pytest.raises(PackError, match=r"^0: packed weight of format fp4_e2m1.*block_size 16.*MXFloat4e2m1Weight"):
        gq.load(tmp_path / "ckpt", linear_stack([Q.MXFloat4e2m1Weight]))
    with pytest.raises(RuntimeError, match="size mismatch for 0.weight"):
        gq.load(tmp_path / "ckpt", nn.Sequential(nn.Linear(32, 64)))
