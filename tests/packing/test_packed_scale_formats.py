"""Packing every scale format (E8M0, E{k}M0, UE4M3 and other unsigned minifloats, bfloat16, float32)
and the NVFP4 per-tensor scale: bit-exact round trips, storage dtypes and sizes, old records."""
import io
import math

import ml_dtypes
import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.formats import BFLOAT16_SCALE, E8M0, FLOAT32_SCALE, UE4M3, ExponentScale, get_scale_format
from groupquant.packing import (E8M0_DTYPE, PackedTensor, pack, scale_format_from_record, scale_format_record,
                                scale_storage_dtype)

SETTINGS = {  # id -> (element format, quantize keywords)
    "nvfp4": ("nvfp4", {}),
    "nvfp4_single_level": ("nvfp4", {"tensor_scale": False}),
    "fp4_ue4m3_two_level_32": ("fp4_e2m1", {"scale_format": "ue4m3", "tensor_scale": True}),
    "fp8_e5m0": ("fp8_e4m3", {"scale_format": "e5m0"}),
    "fp6_e3m0": ("fp6_e2m3", {"scale_format": "e3m0"}),
    "fp8_bf16": ("fp8_e4m3", {"scale_format": "bf16"}),
    "int8_float32": ("int8", {"scale_mode": "float"}),
    "fp4_ue5m2": ("fp4_e2m1", {"scale_format": "ue5m2"}),
    "mxfp4_e8m0": ("fp4_e2m1", {}),
}
CASES = [((5, 70), -1), ((37, 3), 0), ((2, 9, 3, 3), 1)]  # short last blocks; grouping on dim 0; a 4-d tensor


def bits(t):
    """Float bits for comparison, every NaN the same."""
    t = t.float().contiguous()
    return torch.where(torch.isnan(t), torch.full_like(t, math.nan), t).view(torch.int32)


def assert_same(a, b):
    assert a.fmt == b.fmt and a.layout == b.layout and a.dtype == b.dtype
    assert a.scale_format == b.scale_format and a.scale_format.name == b.scale_format.name
    assert a.codes.dtype == b.codes.dtype and torch.equal(a.codes, b.codes)
    assert a.scale.dtype == b.scale.dtype and torch.equal(bits(a.scale), bits(b.scale))
    assert (a.scale_codes is None) == (b.scale_codes is None)
    if a.scale_codes is not None:
        assert a.scale_codes.dtype == b.scale_codes.dtype and torch.equal(a.scale_codes, b.scale_codes)
    assert (a.tensor_scale is None) == (b.tensor_scale is None)
    if a.tensor_scale is not None:
        assert a.tensor_scale.shape == b.tensor_scale.shape and torch.equal(bits(a.tensor_scale), bits(b.tensor_scale))


def data(shape, seed, nan):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-12, 12, shape, generator=g).float())
    flat = x.view(-1)
    flat[:20] = 0.0  # an all-zero block
    if nan:
        flat[-1] = math.nan  # a NaN block (NaN everywhere under a tensor scale)
    return x


@pytest.mark.parametrize("setting", SETTINGS, ids=str)
def test_round_trip_is_bit_exact(setting):
    fmt, kw = SETTINGS[setting]
    for i, (shape, dim) in enumerate(CASES):
        for nan in (False, True):
            x = data(shape, i, nan)
            q = gq.quantize(x, fmt, dim=dim, **kw)
            p = pack(q)
            assert p.scale.dtype == scale_storage_dtype(q.scale_format)
            assert_same(p.unpack(), q)
            buf = io.BytesIO()
            torch.save(p.to_record(), buf)
            buf.seek(0)
            assert_same(PackedTensor.from_record(torch.load(buf, weights_only=True)).unpack(), q)
            assert torch.equal(bits(p.dequantize()), bits(gq.fake_quant(x, fmt, dim=dim, **kw)))


def test_storage_dtypes():
    assert scale_storage_dtype(E8M0) == E8M0_DTYPE
    assert scale_storage_dtype(ExponentScale(5)) == torch.uint8
    assert scale_storage_dtype(UE4M3) == torch.float8_e4m3fn
    assert scale_storage_dtype(get_scale_format("ue5m2")) == torch.uint8
    assert scale_storage_dtype(BFLOAT16_SCALE) == torch.bfloat16
    assert scale_storage_dtype(FLOAT32_SCALE) == torch.float32


def test_nvfp4_bytes_are_fp4_pairs_and_e4m3_scales_and_a_float32_tensor_scale():
    x = data((6, 48), 0, nan=False)
    q = gq.quantize(x, "nvfp4")
    p = pack(q)
    values = q.element_values().numpy().reshape(-1)
    codes = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0xF
    assert p.data.tolist() == (codes[0::2] | codes[1::2] << 4).tolist()  # first element in the low nibble
    assert p.scale.shape == (6, 3) and p.scale.dtype == torch.float8_e4m3fn
    want = q.scale.squeeze(-1).numpy().astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    assert np.array_equal(p.scale.view(torch.uint8).numpy(), want) and not (want & 0x80).any()  # sign bit 0
    assert torch.equal(p.scale.float(), q.scale.squeeze(-1))  # the typed bytes read as the scale values
    assert p.tensor_scale.dtype == torch.float32 and p.tensor_scale.dim() == 0
    assert torch.equal(p.tensor_scale, q.tensor_scale)


def test_nan_scales_are_nan_codes():
    x = data((2, 32), 0, nan=False)
    x[0, 3] = math.nan
    p = pack(gq.quantize(x, "nvfp4", tensor_scale=False))
    assert p.scale.view(torch.uint8)[0, 0] == 0x7F and torch.isnan(p.scale.float()[0, 0])
    p = pack(gq.quantize(x, "fp8_e4m3", scale_format="e5m0"))
    assert p.scale[0, 0] == 31 and torch.isnan(p.unpack().scale[0, 0, 0])


def test_nvfp4_storage_of_a_4096_square_weight():
    p = pack(gq.quantize(torch.randn(4096, 4096), "nvfp4"))
    assert p.nbytes == 4096 * 4096 // 2 + 4096 * 4096 // 16 + 4
    assert p.data.numel() == 4096 * 4096 // 2 and p.scale.numel() == 4096 * 4096 // 16


def test_records_without_scale_format_load_as_before():
    for kw, sf in (({}, E8M0), ({"scale_mode": "float"}, FLOAT32_SCALE)):
        q = gq.quantize(torch.randn(3, 40), "fp6_e3m2", **kw)
        record = pack(q).to_record()
        assert "tensor_scale" not in record
        del record["scale_format"]  # as written before scale formats
        back = PackedTensor.from_record(record)
        assert back.scale_format == sf
        assert_same(back.unpack(), q)
        p = pack(q)
        assert PackedTensor(p.data, p.scale, p.fmt, p.layout, p.dtype).scale_format == sf  # positional form as before
    q = gq.quantize(torch.randn(3, 40), "fp6_e3m2")
    old = PackedTensor(pack(q).data, pack(q).scale.view(torch.uint8), q.fmt, q.layout, q.dtype)  # uint8 bytes
    assert_same(old.unpack(), q)


@pytest.mark.parametrize("name", ["e8m0", "e5m0", "e2m0", "ue4m3", "ue5m2", "float32", "bfloat16"])
def test_scale_format_records(name):
    sf = get_scale_format(name)
    back = scale_format_from_record(scale_format_record(sf))
    assert back == sf and back.name == sf.name and back.describe() == sf.describe()


def test_exponent_scale_flags_survive_the_record():
    from groupquant.formats import ExponentScale
    for sf in (ExponentScale(4, saturating=False), ExponentScale(8, flush_subnormal_blocks=True),
               ExponentScale(5, saturating=False, flush_subnormal_blocks=True)):
        back = scale_format_from_record(scale_format_record(sf))
        assert back == sf and back.name == sf.name and back.describe() == sf.describe()
    assert ExponentScale(4, saturating=False) != get_scale_format("e4m0")


def test_bad_input_is_named():
    q = gq.quantize(torch.randn(2, 32), "nvfp4")
    p = pack(q)
    with pytest.raises(ValueError, match="ue4m3"):
        PackedTensor(p.data, p.scale.float(), p.fmt, p.layout, p.dtype, p.scale_format)
    with pytest.raises(ValueError, match="tensor scale"):
        PackedTensor(p.data, p.scale, p.fmt, p.layout, p.dtype, p.scale_format, p.tensor_scale.reshape(1))
    with pytest.raises(ValueError, match="'kind'"):
        scale_format_from_record({"kind": "e8m0"})
    with pytest.raises(ValueError, match="'bits'"):
        scale_format_from_record({"kind": "exponent"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_round_trip_and_to():
    x = data((5, 70), 0, nan=False).cuda()
    q = gq.quantize(x, "nvfp4")
    p = pack(q)
    assert_same(p.unpack(), q)
    assert torch.equal(bits(p.dequantize()), bits(gq.fake_quant(x, "nvfp4")))
    assert_same(p.to("cpu").unpack(), q.to(torch.device("cpu")))
