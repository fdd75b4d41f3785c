import torch

import groupquant as gq


def test_quantize_dequantize_equals_fake_quant_for_every_mx_format():
    x = torch.randn(8, 70)
    for name in gq.MX_FORMATS:
        assert torch.equal(gq.quantize(x, name).dequantize(), gq.fake_quant(x, name))
