"""gpt-oss-style MXFP4 tensors (``*_blocks`` uint8 [rows, G, 16], ``*_scales`` uint8 [rows, G]) into
packed linears: a synthetic checkpoint, decoded here independently with the published table."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import groupquant as gq
from groupquant.export import PackError, mxfp4_blocks, mxfp4_linear, mxfp4_packed_tensor

# the FP4 (E2M1) code -> value table of the gpt-oss checkpoints
FP4_VALUES = [+0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def gpt_oss_dequantize(blocks: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Independent decode: low nibble = even element, high nibble = odd element, times 2**(s - 127)."""
    lut = torch.tensor(FP4_VALUES)
    rows, groups, _ = blocks.shape
    out = torch.empty(rows, groups, 32)
    out[..., 0::2] = lut[(blocks & 0x0F).long()]
    out[..., 1::2] = lut[(blocks >> 4).long()]
    out = torch.ldexp(out, scales.to(torch.int32).unsqueeze(-1) - 127)
    return out.reshape(rows, groups * 32)


def synthetic(rows=24, groups=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    blocks = torch.randint(0, 256, (rows, groups, 16), dtype=torch.uint8, generator=g)
    scales = torch.randint(110, 135, (rows, groups), dtype=torch.uint8, generator=g)
    return blocks, scales


def test_packed_tensor_decodes_as_gpt_oss():
    blocks, scales = synthetic()
    packed = mxfp4_packed_tensor(blocks, scales, dtype=torch.float32)
    assert torch.equal(packed.dequantize(), gpt_oss_dequantize(blocks, scales))


@pytest.mark.parametrize("rows", [1, 7, 64])
def test_linear_from_blocks(rows):
    blocks, scales = synthetic()
    bias = torch.randn(24)
    layer = mxfp4_linear(blocks, scales, bias)
    x = torch.randn(rows, 160)
    ref = F.linear(x.double(), gpt_oss_dequantize(blocks, scales).double(), bias.double())
    assert float((layer(x) - ref).norm() / ref.norm()) < 1e-5


def test_round_trip_with_groupquant_packing():
    w = torch.randn(16, 96)
    packed = gq.pack(gq.quantize(w, "fp4_e2m1"))
    blocks, scales = mxfp4_blocks(packed)
    assert blocks.shape == (16, 3, 16) and scales.shape == (16, 3)
    assert torch.equal(gpt_oss_dequantize(blocks, scales), gq.fake_quant(w, "fp4_e2m1"))
    again = mxfp4_packed_tensor(blocks, scales, dtype=torch.float32)
    assert torch.equal(again.data, packed.data) and torch.equal(again.dequantize(), packed.dequantize())


def test_bad_tensors_are_named():
    blocks, scales = synthetic()
    with pytest.raises(PackError, match="attn.qkv.*scales"):
        mxfp4_packed_tensor(blocks, scales[:, :4], name="attn.qkv")
    with pytest.raises(PackError, match="blocks must be"):
        mxfp4_packed_tensor(blocks.reshape(24, 80), scales)
    with pytest.raises(PackError, match="in_features"):
        mxfp4_packed_tensor(blocks, scales, in_features=100)


def test_blocks_of_a_quant_layer_read_its_group_quantized_weight():
    from groupquant.nn import QuantLinear
    from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Weight

    torch.manual_seed(7)
    layer = QuantLinear(64, 6, weight_quant=MXFloat4e2m1Weight)
    blocks, scales = mxfp4_blocks(layer)
    ref = gq.quantize(layer.weight.detach(), "fp4_e2m1")  # the op itself: codes [6, 2, 32], E8M0 [6, 2, 1]
    assert torch.equal(blocks & 0xF, ref.codes[..., 0::2].to(torch.uint8))
    assert torch.equal(blocks >> 4, ref.codes[..., 1::2].to(torch.uint8))
    assert torch.equal(scales, ref.scale_codes.squeeze(-1))
    packed_blocks, packed_scales = mxfp4_blocks(gq.pack_model(layer))  # from packed storage: the same bytes
    assert torch.equal(packed_blocks, blocks) and torch.equal(packed_scales, scales)
    with pytest.raises(PackError, match="weight_quant is None"):
        mxfp4_blocks(QuantLinear(64, 6))
    with pytest.raises(PackError, match="fp8_e4m3"):
        mxfp4_blocks(QuantLinear(64, 6, weight_quant=MXFloat8e4m3Weight))
