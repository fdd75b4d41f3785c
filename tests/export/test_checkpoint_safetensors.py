"""groupquant's packed safetensors checkpoint: bit-exact round trips, read with safetensors' own reader (no pickle)."""
import json

import pytest
import torch
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import PackedLinear, pack_model

st = pytest.importorskip("safetensors.torch", reason="the safetensors checkpoint tests need safetensors")

PACKABLE = [Q.MXFloat4e2m1Weight, Q.MXFloat6e2m3Weight, Q.MXFloat6e3m2Weight, Q.MXFloat8e4m3Weight,
            Q.MXFloat8e5m2Weight, Q.MXInt8Weight, Q.NVFP4Weight]


@pytest.mark.parametrize("wq", PACKABLE, ids=lambda q: q.__name__)
def test_round_trip_bit_exact(tmp_path, linear_stack, wq):
    model = linear_stack([wq, wq])
    path = gq.save(model, tmp_path / "m.safetensors")
    x = torch.randn(5, 64)
    packed = pack_model(linear_stack([wq, wq]))
    gq.load(path, packed)
    for i in (0, 2):
        want = model[i].group_quantized_weight()
        got = packed[i].group_quantized_weight()
        assert torch.equal(got.codes, want.codes) and torch.equal(got.scale_codes, want.scale_codes)
        assert (got.tensor_scale is None) == (want.tensor_scale is None)
        if want.tensor_scale is not None:
            assert torch.equal(got.tensor_scale, want.tensor_scale)
    assert torch.equal(packed(x), pack_model(model)(x))  # the same packed layers compute the same outputs


def test_file_is_plain_safetensors_with_a_json_header(tmp_path, linear_stack):
    model = linear_stack([Q.NVFP4Weight, Q.MXFloat4e2m1Weight])
    path = gq.save(model, tmp_path / "m.safetensors")
    tensors = st.load_file(str(path))  # safetensors' own reader: no pickle anywhere
    from safetensors import safe_open
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
    assert meta["format"] == "groupquant" and meta["format_version"] == "1"
    assert meta["groupquant_version"] == gq.__version__
    layers = json.loads(meta["layers"])
    assert layers["0.weight"]["element_format"]["name"] == "fp4_e2m1" and layers["0.weight"]["block_size"] == 16
    assert layers["0.weight"]["scale_format"]["name"] == "ue4m3" and layers["0.weight"]["tensor_scale"] == "float32"
    assert layers["2.weight"]["scale_format"]["name"] == "e8m0" and layers["2.weight"]["tensor_scale"] == "none"
    q = model[0].group_quantized_weight()
    assert torch.equal(tensors["0.weight.scales"], q.scale_codes.squeeze(-1))
    assert torch.equal(tensors["0.weight.tensor_scale"], q.tensor_scale)
    assert tensors["0.weight.codes"].numel() == 64 * 64 // 2  # two FP4 codes per byte
    assert torch.equal(tensors["2.bias"], model[2].bias.detach())
    assert "0.weight" not in tensors


def test_float_twin_gets_the_dequantized_weights(tmp_path, linear_stack):
    model = linear_stack([Q.MXFloat6e3m2Weight, Q.MXInt8Weight], dtype=torch.bfloat16)
    path = gq.save(model, tmp_path / "m.safetensors")
    twin = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to(torch.bfloat16)
    gq.load(path, twin)
    for i in (0, 2):
        assert torch.equal(twin[i].weight, model[i].group_quantized_weight().dequantize())
        assert torch.equal(twin[i].bias, model[i].bias)


def test_without_a_model_builds_packed_layers(tmp_path, linear_stack):
    model = linear_stack([Q.MXFloat8e4m3Weight, Q.NVFP4Weight])
    loaded = gq.load(gq.save(model, tmp_path / "m.safetensors"))
    assert loaded.format == "safetensors" and set(loaded.layers) == {"0", "2"} and loaded.tensors == {}
    x = torch.randn(3, 64)
    rebuilt = nn.Sequential(loaded.layers["0"], nn.ReLU(), loaded.layers["2"])
    assert all(isinstance(m, PackedLinear) for m in loaded.layers.values())
    assert torch.equal(rebuilt(x), pack_model(model)(x))


def test_shared_layer_stored_once(tmp_path):
    torch.manual_seed(0)
    layer = gq.nn.QuantLinear(32, 32, weight_quant=Q.MXFloat4e2m1Weight)
    model = nn.Sequential(layer, nn.ReLU(), layer)
    path = gq.save(model, tmp_path / "m.safetensors")
    assert sorted(k for k in st.load_file(str(path)) if k.endswith(".codes")) == ["0.weight.codes"]
    fresh = nn.Sequential(l2 := gq.nn.QuantLinear(32, 32, weight_quant=Q.MXFloat4e2m1Weight), nn.ReLU(), l2)
    gq.load(path, fresh)
    assert fresh[0] is fresh[2] and torch.equal(fresh[0].weight, layer.group_quantized_weight().dequantize())


def test_tiny_llama_tied_embeddings_round_trip(tmp_path, tiny_llama):
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    path = gq.save(model, tmp_path / "m.safetensors")
    assert "lm_head.weight" not in st.load_file(str(path))  # tied: stored once
    twin = tiny_llama()
    gq.load(path, twin)
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, model(ids).logits)


def test_other_files_refused_by_name(tmp_path):
    st.save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(gq.export.CheckpointError, match="not a groupquant safetensors checkpoint"):
        gq.load(tmp_path / "plain.safetensors")


def test_conv_weights_need_the_model(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(gq.nn.QuantConv2d(3, 4, 3, weight_quant=Q.MXFloat8e4m3Weight))
    path = gq.save(model, tmp_path / "m.safetensors")
    with pytest.raises(gq.export.CheckpointError, match=r"^groupquant.load: 0: a packed linear weight is 2-D .*pass the "
                                                        "model to load it into"):
        gq.load(path)
    fresh = nn.Sequential(gq.nn.QuantConv2d(3, 4, 3, weight_quant=Q.MXFloat8e4m3Weight))
    gq.load(path, fresh)
    assert torch.equal(fresh[0].weight, model[0].group_quantized_weight().dequantize())
