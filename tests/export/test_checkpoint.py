"""groupquant.save / groupquant.load: one entry for the three formats, and its errors."""
import pytest
import torch
from torch import nn

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import CHECKPOINT_FORMATS, CheckpointError, LoadedCheckpoint, PackError, pack_model

pytest.importorskip("safetensors", reason="the checkpoint tests need safetensors")
FILES = {"safetensors": "m.safetensors", "compressed-tensors": "ckpt", "gguf": "m.gguf"}


def test_public_names():
    assert {"save", "load"} <= set(gq.__all__) and gq.save is gq.export.save and gq.load is gq.export.load
    assert CHECKPOINT_FORMATS == ("safetensors", "compressed-tensors", "gguf")


@pytest.mark.parametrize("fmt", CHECKPOINT_FORMATS)
def test_every_format_round_trips_through_one_entry(tmp_path, linear_stack, fmt):
    pytest.importorskip({"safetensors": "safetensors", "compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    model = linear_stack([Q.MXFloat4e2m1Weight, Q.NVFP4Weight])
    path = gq.save(model, tmp_path / FILES[fmt], format=fmt)
    loaded = gq.load(path)
    assert isinstance(loaded, LoadedCheckpoint) and loaded.format == fmt
    x = torch.randn(3, 64)
    rebuilt = nn.Sequential(loaded.layers["0"], nn.ReLU(), loaded.layers["2"])
    assert torch.equal(rebuilt(x), pack_model(model)(x))
    packed = pack_model(linear_stack([Q.MXFloat4e2m1Weight, Q.NVFP4Weight]))
    assert gq.load(path, packed) is packed
    assert torch.equal(packed(x), rebuilt(x))


def test_unknown_format_named(tmp_path, linear_stack):
    with pytest.raises(ValueError, match=r"format='onnx' is not one of \['safetensors', 'compressed-tensors', "):
        gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / "m", format="onnx")
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        gq.save("model", tmp_path / "m")


def test_missing_file_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint at .*nothing.safetensors"):
        gq.load(tmp_path / "nothing.safetensors")


@pytest.mark.parametrize("fmt", CHECKPOINT_FORMATS)
def test_another_shape_refused_by_layer(tmp_path, linear_stack, fmt):
    pytest.importorskip({"safetensors": "safetensors", "compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    path = gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / FILES[fmt], format=fmt)
    small = pack_model(linear_stack([Q.MXFloat4e2m1Weight], features=32))
    with pytest.raises(PackError, match=r"^0: packed weight of format fp4_e2m1, shape \(64, 64\).*shape \(32, 32\)"):
        gq.load(path, small)


@pytest.mark.parametrize("fmt", ["compressed-tensors", "gguf"])
def test_nan_weights_refused_by_layer(tmp_path, linear_stack, fmt):
    pytest.importorskip({"compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    model = linear_stack([Q.MXFloat4e2m1Weight])
    with torch.no_grad():
        model[0].weight[3, 5] = float("nan")
    with pytest.raises(CheckpointError, match=r"^0(\.weight)?: the weight has NaN or Inf in a block"):
        gq.save(model, tmp_path / FILES[fmt], format=fmt)


def test_float_model_to_compressed_tensors_is_refused(tmp_path):
    pytest.importorskip("compressed_tensors")
    with pytest.raises(CheckpointError, match="no NVFP4 or MXFP4 quantized layer"):
        gq.save(nn.Sequential(nn.Linear(4, 4)), tmp_path / "ckpt", format="compressed-tensors")


def test_a_file_without_the_tied_head_loads_into_a_tied_model(tmp_path, tiny_llama):
    pytest.importorskip("compressed_tensors")
    import json
    from safetensors import safe_open
    from safetensors.torch import save_file
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    weights = tmp_path / "ckpt" / "model.safetensors"
    with safe_open(str(weights), framework="pt") as f:  # as another writer would: no groupquant metadata
        tensors = {k: f.get_tensor(k) for k in f.keys()}
        extra = json.loads(f.metadata()["groupquant"])
    assert extra["aliases"] == {"lm_head.weight": "model.embed_tokens.weight"}
    save_file(tensors, str(weights), metadata={"format": "pt"})
    twin = tiny_llama()
    gq.load(tmp_path / "ckpt", twin)  # strict: lm_head.weight comes from the tie, not from the file
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    assert torch.equal(twin.lm_head.weight, model.model.embed_tokens.weight)


def _disk_full(*args, **kwargs):
    raise OSError(28, "No space left on device")


@pytest.mark.parametrize("fmt", CHECKPOINT_FORMATS)
def test_a_failed_save_keeps_the_old_checkpoint(tmp_path, linear_stack, monkeypatch, fmt):
    """Each writer writes beside the path and renames: a save failing part way (a full disk while the
    tensors are written) leaves the existing checkpoint as it was and no partial file."""
    pytest.importorskip({"safetensors": "safetensors", "compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    path = gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / FILES[fmt], format=fmt)
    before = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    if fmt == "gguf":
        import gguf
        monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", _disk_full)
    else:  # both safetensors writers call safetensors.torch.save_file
        import safetensors.torch
        monkeypatch.setattr(safetensors.torch, "save_file", _disk_full)
    with pytest.raises(OSError, match="No space left"):
        gq.save(linear_stack([Q.NVFP4Weight]), path, format=fmt)
    after = {p.relative_to(tmp_path): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    old = pack_model(linear_stack([Q.MXFloat4e2m1Weight]))[0]
    assert torch.equal(gq.load(path).layers["0"].weight_scale, old.weight_scale)


@pytest.mark.parametrize("fmt", CHECKPOINT_FORMATS)
@pytest.mark.parametrize("damage", ["empty", "truncated", "garbage"])
def test_unreadable_files_are_named_checkpoint_errors(tmp_path, linear_stack, fmt, damage):
    pytest.importorskip({"safetensors": "safetensors", "compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    path = gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / FILES[fmt], format=fmt)
    file = path / "model.safetensors" if fmt == "compressed-tensors" else path
    data = file.read_bytes()
    file.write_bytes({"empty": b"", "truncated": data[:len(data) // 2], "garbage": data[:4] + b"\x07" * 200}[damage])
    with pytest.raises(CheckpointError, match=rf"{file if fmt != 'compressed-tensors' else path}"):
        gq.load(path)


def test_another_head_count_with_the_same_shapes_is_refused(tmp_path, tiny_llama):
    """A Llama with 8 heads of 8 has the tensor shapes of one with 4 heads of 16 (hidden 64, head_dim
    set): the config's head count, kept in every format, tells them apart."""
    transformers = pytest.importorskip("transformers")
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    cfg = transformers.LlamaConfig(**{**model.config.to_dict(), "num_attention_heads": 8, "num_key_value_heads": 4,
                                      "head_dim": 8})
    other = gq.quantize_model(transformers.LlamaForCausalLM(cfg).eval(), weight_quant=Q.MXFloat4e2m1Weight,
                              include=["model.layers.*"])
    assert {k: v.shape for k, v in other.state_dict().items()} == {k: v.shape for k, v in model.state_dict().items()}
    for fmt in CHECKPOINT_FORMATS:
        path = gq.save(model, tmp_path / FILES[fmt], format=fmt)
        with pytest.raises(CheckpointError, match=r"num_attention_heads=4; the model loaded into has "
                                                  r"num_attention_heads=8"):
            gq.load(path, other, strict=False)
        gq.load(path, tiny_llama(Q.MXFloat4e2m1Weight))  # the same architecture loads


def test_save_onto_a_path_of_the_wrong_kind_is_refused_before_writing(tmp_path, linear_stack):
    (tmp_path / "folder").mkdir()
    with pytest.raises(CheckpointError, match="writes one file; .*folder is a directory"):
        gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / "folder")
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="writes a directory; .*file is a file"):
        gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / "file", format="compressed-tensors")


@pytest.mark.parametrize("fmt", ["compressed-tensors", "gguf"])
def test_weight_only_formats_say_that_input_quantizers_are_dropped(tmp_path, fmt):
    pytest.importorskip({"compressed-tensors": "compressed_tensors", "gguf": "gguf"}[fmt])
    model = gq.quantize_model(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)), recipe="mxfp4")
    with pytest.warns(UserWarning, match=rf"format='{fmt}'\): 2 layer\(s\) quantize their inputs .* readers run those "
                                         r"inputs in float"):
        gq.save(model, tmp_path / FILES[fmt], format=fmt)


def test_rope_settings_compare_across_transformers_versions(tiny_llama):
    """A config written by transformers 4.x (``rope_theta`` at the top, ``rope_scaling``) and one of
    5.x (``rope_parameters``) with the same RoPE fit each other; another base does not."""
    from groupquant.export.checkpoints.fit import check_config
    model = tiny_llama()
    v4 = {**model.config.to_dict(), "rope_parameters": None, "rope_scaling": None, "rope_theta": 10000.0}
    check_config("m.safetensors", v4, model)
    with pytest.raises(CheckpointError, match=r"with rope=\{'rope_theta': 500000.0, 'rope_type': 'default'\}"):
        check_config("m.safetensors", {**v4, "rope_theta": 500000.0}, model)
