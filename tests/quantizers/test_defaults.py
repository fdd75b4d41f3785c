"""Per-tensor / per-channel / per-group defaults against plain PyTorch and ml_dtypes."""
import numpy as np
import pytest
import torch

from groupquant.quantizers import (Fp8e4m3ActPerTensor, Fp8e4m3WeightPerTensor, Int4WeightPerGroupFloat,
                                   Int8ActPerTensor, Int8WeightPerChannel, Int8WeightPerTensor, Int16BiasPerTensor,
                                   Uint8ActPerTensor)

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_int8_weight_per_tensor():
    w = torch.randn(32, 50)
    s = w.abs().max() / 127
    assert torch.equal(Int8WeightPerTensor.tensor_quant(w).value, torch.round(w / s).clamp(-127, 127) * s)


def test_int8_weight_per_channel():
    w = torch.randn(12, 8, 3)
    s = w.abs().amax(dim=(1, 2), keepdim=True) / 127
    assert torch.equal(Int8WeightPerChannel.tensor_quant(w).value, torch.round(w / s).clamp(-127, 127) * s)


def test_int4_weight_per_group_of_128():
    w = torch.randn(6, 256)
    g = w.reshape(6, 2, 128)
    s = g.abs().amax(dim=2, keepdim=True) / 7
    out = Int4WeightPerGroupFloat.tensor_quant(w)
    assert out.value.shape == (6, 2, 128) and out.scale.shape == (6, 2, 1)
    assert torch.equal(out.value, torch.round(g / s).clamp(-7, 7) * s)


def _fp8_reference(x: np.ndarray, s: np.float32) -> np.ndarray:
    y = np.clip(x / s, -448.0, 448.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    return y * s


def test_fp8_weight_per_tensor_against_ml_dtypes():
    w = torch.randn(40, 30) * 3
    s = np.float32(np.abs(w.numpy()).max() / np.float32(448.0))
    np.testing.assert_array_equal(Fp8e4m3WeightPerTensor.tensor_quant(w).value.numpy(), _fp8_reference(w.numpy(), s))


def test_fp8_act_per_tensor_uses_running_stats():
    quant = Fp8e4m3ActPerTensor.tensor_quant
    a, b = torch.randn(64) * 2, torch.randn(64) * 6
    quant(a)
    quant(b)
    quant.eval()
    running = 0.9 * a.abs().max() + 0.1 * b.abs().max()
    s = np.float32(running.item() / np.float32(448.0))
    x = torch.randn(64) * 4
    np.testing.assert_allclose(quant(x).value.numpy(), _fp8_reference(x.numpy(), s), rtol=1e-6)


def test_int8_act_is_wide_range_and_uint8_is_unsigned():
    assert (Int8ActPerTensor.qmin, Int8ActPerTensor.qmax) == (-128, 127)
    assert (Uint8ActPerTensor.qmin, Uint8ActPerTensor.qmax) == (0, 255)
    x = torch.rand(100)
    x[0] = 1.0
    s = torch.tensor(1.0) / 255
    assert torch.allclose(Uint8ActPerTensor.tensor_quant(x).value, torch.round(x / s) * s)
    assert Uint8ActPerTensor.tensor_quant(-x).value.max().item() == 0.0


def test_int16_bias():
    b = torch.randn(10)
    s = b.abs().max() / 32767
    assert torch.equal(Int16BiasPerTensor.tensor_quant(b).value, torch.round(b / s).clamp(-32767, 32767) * s)
