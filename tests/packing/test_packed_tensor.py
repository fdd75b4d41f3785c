import io

import ml_dtypes
import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.formats import FloatFormat, IntFormat, SpecialValues
from groupquant.packing import E8M0_DTYPE, PackedTensor, pack

GENERIC_FORMATS = [
    *(IntFormat(w) for w in (2, 3, 4, 5, 7, 9, 12, 16)),
    IntFormat(6, signed=False), IntFormat(16, signed=False), IntFormat(8, narrow_range=False),
    FloatFormat(3, 4), FloatFormat(4, 3, SpecialValues.NONE), FloatFormat(4, 3, SpecialValues.FNUZ),
    FloatFormat(5, 2, SpecialValues.FNUZ), FloatFormat(5, 10), FloatFormat(2, 2), FloatFormat(3, 3, signed=False),
    FloatFormat(1, 0),
]
CASES = [  # (shape, dim, block_size)
    ((5, 70), -1, 32), ((37, 3), 0, 32), ((2, 9, 3, 3), 1, 4), ((7,), 0, None), ((3, 33), 1, 1),
]


def assert_same(a, b):
    assert a.fmt == b.fmt and a.layout == b.layout and a.dtype == b.dtype
    assert a.codes.dtype == b.codes.dtype and torch.equal(a.codes, b.codes)
    assert torch.equal(a.scale, b.scale) or torch.allclose(a.scale, b.scale, equal_nan=True, rtol=0, atol=0)
    assert (a.scale_codes is None) == (b.scale_codes is None)
    if a.scale_codes is not None:
        assert torch.equal(a.scale_codes, b.scale_codes)


def special_input(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-20, 20, shape, generator=g).float())
    flat = x.view(-1)
    flat[:5] = 0.0  # a (partly) zero group
    if flat.numel() > 12:
        flat[9] = float("nan")
        flat[11] = float("inf")
    return x


@pytest.mark.parametrize("fmt", gq.MX_FORMATS + GENERIC_FORMATS, ids=str)
def test_round_trip_is_bit_exact(fmt):
    for i, (shape, dim, block) in enumerate(CASES):
        x = special_input(shape, i)
        q = gq.quantize(x, fmt, block_size=block, dim=dim)
        p = pack(q)
        assert_same(p.unpack(), q)
        assert torch.equal(p.dequantize().nan_to_num(7.0), gq.fake_quant(x, fmt, block, dim).nan_to_num(7.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_round_trip_keeps_dtype_and_float_scales(dtype):
    x = torch.randn(4, 40).to(dtype)
    for mode in ("floor", "float"):
        q = gq.quantize(x, "fp6_e2m3", scale_mode=mode)
        p = pack(q)
        assert p.power_of_two_scales == (mode != "float")
        assert_same(p.unpack(), q)
        assert p.dequantize().dtype == dtype


def mx_values(fmt, shape=(6, 64), seed=0):
    q = gq.quantize(special_input(shape, seed), fmt)
    return q, pack(q), q.element_values().numpy()


@pytest.mark.parametrize("fmt,torch_dtype,np_dtype", [
    ("fp8_e4m3", torch.float8_e4m3fn, ml_dtypes.float8_e4m3fn),
    ("fp8_e5m2", torch.float8_e5m2, ml_dtypes.float8_e5m2),
    ("float_fnuz_e4m3", torch.float8_e4m3fnuz, ml_dtypes.float8_e4m3fnuz),
])
def test_fp8_bytes_are_the_ml_dtypes_encoding(fmt, torch_dtype, np_dtype):
    q, p, values = mx_values(fmt)
    assert p.data.dtype == torch_dtype
    finite = np.isfinite(values)
    want = values.astype(np_dtype).view(np.uint8)
    got = p.data.view(torch.uint8).numpy()
    assert np.array_equal(got[finite], want[finite])
    assert np.isnan(p.data.float().numpy()[~finite]).all()
    assert torch.equal(p.data.float()[torch.from_numpy(finite)], q.element_values()[torch.from_numpy(finite)])


def test_int8_bytes_are_the_fixed_point_integers():
    q, p, values = mx_values("int8")
    assert p.data.dtype == torch.int8
    assert np.array_equal(p.data.numpy(), np.round(np.nan_to_num(values) * 64).astype(np.int8))


def pairs_low_nibble_first(nibbles):
    nibbles = list(nibbles) + [0] * (len(nibbles) % 2)
    return [nibbles[i] | (nibbles[i + 1] << 4) for i in range(0, len(nibbles), 2)]


def test_fp4_bytes_are_ml_dtypes_codes_two_per_byte_low_first():
    q, p, values = mx_values("fp4_e2m1", shape=(3, 37))
    codes = np.nan_to_num(values).astype(ml_dtypes.float4_e2m1fn).view(np.uint8).reshape(-1) & 0xF
    assert p.data.tolist() == pairs_low_nibble_first(codes.tolist())


def test_fp4_bytes_match_onnx_float4e2m1_packing():
    onnx = pytest.importorskip("onnx")
    q, p, values = mx_values("fp4_e2m1", shape=(2, 35))
    t = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT4E2M1, [values.size],
                                np.nan_to_num(values).reshape(-1).tolist())
    onnx_bytes = np.array(t.int32_data, dtype=np.int64).astype(np.uint8)
    assert p.data.tolist() == onnx_bytes.tolist()


@pytest.mark.parametrize("fmt,np_dtype", [("fp6_e2m3", ml_dtypes.float6_e2m3fn),
                                          ("fp6_e3m2", ml_dtypes.float6_e3m2fn)])
def test_fp6_bytes_are_ml_dtypes_codes_four_in_three_bytes(fmt, np_dtype):
    q, p, values = mx_values(fmt, shape=(3, 37))
    codes = (np.nan_to_num(values).astype(np_dtype).view(np.uint8).reshape(-1) & 0x3F).tolist()
    codes += [0] * (-len(codes) % 4)
    want = []
    for a, b, c, d in zip(codes[0::4], codes[1::4], codes[2::4], codes[3::4]):
        want += [a | (b & 0x3) << 6, b >> 2 | (c & 0xF) << 4, c >> 4 | d << 2]
    assert p.data.tolist() == want[:p.data.numel()]


def test_scale_bytes_are_e8m0_one_per_group():
    q, p, _ = mx_values("fp8_e4m3", shape=(6, 64))
    assert p.scale.dtype == E8M0_DTYPE and tuple(p.scale.shape) == (6, 2)
    want = q.scale.squeeze(-1).numpy().astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    assert np.array_equal(p.scale.view(torch.uint8).numpy(), want)


def test_mxfp4_storage_is_4_25_bits_per_element():
    x = torch.randn(256, 1024)
    p = pack(gq.quantize(x, "fp4_e2m1"))
    assert p.nbytes == x.numel() * 4.25 / 8
    assert p.nbytes / (x.numel() * 4) == 4.25 / 32


def test_record_survives_weights_only_torch_load():
    q = gq.quantize(torch.randn(3, 50, dtype=torch.bfloat16), FloatFormat(3, 4), block_size=16, dim=1)
    buf = io.BytesIO()
    torch.save(pack(q).to_record(), buf)
    buf.seek(0)
    back = PackedTensor.from_record(torch.load(buf, weights_only=True))
    assert_same(back.unpack(), q)


def test_bad_input_is_named():
    q = gq.quantize(torch.randn(2, 32), "fp4_e2m1")
    p = pack(q)
    with pytest.raises(TypeError, match="GroupQuantized"):
        pack(p)
    with pytest.raises(ValueError, match="packed elements"):
        PackedTensor(p.data[:-1], p.scale, p.fmt, p.layout, p.dtype)
    with pytest.raises(ValueError, match="packed scales"):
        PackedTensor(p.data, p.scale.view(torch.uint8).float().unsqueeze(-1), p.fmt, p.layout, p.dtype)
    record = p.to_record()
    del record["block_size"]
    with pytest.raises(ValueError, match="block_size"):
        PackedTensor.from_record(record)
    with pytest.raises(ValueError, match="'dtype'"):
        PackedTensor.from_record({**p.to_record(), "dtype": "torch.int8"})


def test_anything_with_to_group_quantized_packs_like_its_conversion():
    q = gq.quantize(torch.randn(3, 40), "fp6_e3m2")

    class Converts:
        def to_group_quantized(self):
            return q

    assert_same(pack(Converts()).unpack(), q)
