"""groupquant.load of a gpt-oss MXFP4 safetensors file (``*_blocks`` / ``*_scales`` pairs): one more row
of the checkpoint format table, read only. A synthetic file, checked byte for byte and against an
independent decode with the published FP4 table."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.export import CHECKPOINT_FORMATS, CheckpointError, LoadedCheckpoint, mxfp4_blocks

st = pytest.importorskip("safetensors.torch")

FP4_VALUES = [+0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def decode(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """gpt-oss decode: low nibble = even element, high nibble = odd element, times 2**(s - 127)."""
    lut = torch.tensor(FP4_VALUES, dtype=torch.float64)
    out = torch.stack([lut[(blocks & 0x0F).long()], lut[(blocks >> 4).long()]], dim=-1).flatten(-2)
    return torch.ldexp(out, scales.to(torch.int32).unsqueeze(-1) - 127).flatten(-2)


def _file(tmp_path):
    g = torch.Generator().manual_seed(3)
    t = {"attn.qkv_blocks": torch.randint(0, 256, (12, 2, 16), dtype=torch.uint8, generator=g),
         "attn.qkv_scales": torch.randint(118, 130, (12, 2), dtype=torch.uint8, generator=g),
         "attn.qkv_bias": torch.randn(12, generator=g),
         "experts.up_blocks": torch.randint(0, 256, (3, 8, 4, 16), dtype=torch.uint8, generator=g),
         "experts.up_scales": torch.randint(118, 130, (3, 8, 4), dtype=torch.uint8, generator=g),
         "experts.up_bias": torch.randn(3, 8, generator=g),
         "embed.weight": torch.randn(10, 64, generator=g)}
    path = tmp_path / "model.safetensors"
    st.save_file(t, str(path))
    return path, t


def test_load_reads_a_gpt_oss_file_byte_for_byte(tmp_path):
    path, t = _file(tmp_path)
    loaded = gq.load(path)
    assert isinstance(loaded, LoadedCheckpoint) and loaded.format == "gpt-oss-mxfp4"
    assert sorted(loaded.layers) == ["attn.qkv", "experts.up.0", "experts.up.1", "experts.up.2"]
    assert sorted(loaded.tensors) == ["embed.weight"] and torch.equal(loaded.tensors["embed.weight"], t["embed.weight"])
    blocks, scales = mxfp4_blocks(loaded.layers["attn.qkv"])
    assert torch.equal(blocks, t["attn.qkv_blocks"]) and torch.equal(scales, t["attn.qkv_scales"])
    for e in range(3):
        blocks, scales = mxfp4_blocks(loaded.layers[f"experts.up.{e}"])
        assert torch.equal(blocks, t["experts.up_blocks"][e]) and torch.equal(scales, t["experts.up_scales"][e])
        assert torch.equal(loaded.layers[f"experts.up.{e}"].bias, t["experts.up_bias"][e])


def test_a_loaded_layer_computes_the_gpt_oss_linear(tmp_path):
    path, t = _file(tmp_path)
    layer = gq.load(path).layers["attn.qkv"]
    x = torch.randn(5, 64)
    ref = F.linear(x.double(), decode(t["attn.qkv_blocks"], t["attn.qkv_scales"]), t["attn.qkv_bias"].double())
    assert float((layer(x).double() - ref).norm() / ref.norm()) < 1e-5


def test_gpt_oss_is_read_only_and_other_files_keep_their_reader(tmp_path):
    assert "gpt-oss-mxfp4" not in CHECKPOINT_FORMATS
    with pytest.raises(ValueError, match="read only"):
        gq.save(torch.nn.Linear(4, 4), tmp_path / "x.safetensors", format="gpt-oss-mxfp4")
    plain = tmp_path / "plain.safetensors"  # no pairs, no groupquant metadata: still the safetensors reader's error
    st.save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(CheckpointError, match="not a groupquant safetensors checkpoint"):
        gq.load(plain)
