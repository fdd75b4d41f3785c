"""llm/measures.py: the bytes of a model in memory count a packed layer's state, which it holds in
one record rather than in buffers."""
import torch
from torch import nn

import groupquant as gq
from groupquant.llm import model_bytes
from groupquant.nn import QuantLinear
from groupquant.quantizers import MXFloat4e2m1Weight


def test_model_bytes_of_a_packed_model_count_its_records():
    torch.manual_seed(0)
    embed = nn.Embedding(10, 64)
    packed = gq.pack_model(nn.Sequential(embed, QuantLinear(64, 8, weight_quant=MXFloat4e2m1Weight)))
    # embedding 10 x 64 float32; the layer: 64 * 8 FP4 codes (256 bytes), 8 rows x 2 E8M0 bytes,
    # 8 float32 biases, the decoding tables (16 FP4 values, 256 scales, float32)
    assert model_bytes(packed) == 10 * 64 * 4 + 256 + 16 + 8 * 4 + (16 + 256) * 4
    packed[1].weight_codes = embed.weight.detach().view(torch.uint8).reshape(-1)[:256]  # a storage held twice
    assert model_bytes(packed) == 10 * 64 * 4 + 16 + 8 * 4 + (16 + 256) * 4
