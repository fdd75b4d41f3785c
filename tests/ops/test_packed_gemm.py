"""The packed-weight GEMM (ops/packed_gemm.py, csrc/packed_gemm*): decode tables, bit-exact
weight decoding, outputs against F.linear on the dequantized weight, NaN scales, bad input."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import groupquant as gq
from groupquant.formats import E8M0, IntFormat, get_format
from groupquant.ops import decode, native
from groupquant.ops.packed_gemm import PackedWeight, packed_decode, packed_linear, reference_packed_decode
from groupquant.ops.packed_gemm_params import packed_field_names, packed_gemm_params
from groupquant.ops.packed_tables import (DECODE_HALF, DECODE_INT8, DECODE_NIBBLE_BF16, DECODE_TABLE,
                                          element_value_table, fast_decode, scale_table)

FORMATS = ["fp4_e2m1", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "fp8_e5m2", "int8"]
INT4 = IntFormat(name="int4_mx", bit_width=4, signed=True, narrow_range=True, frac_bits=2)


def packed_weight(fmt, w: torch.Tensor, block: int = 32):
    """(PackedWeight, dequantized float32 weight) of ``w`` quantized to ``fmt`` in blocks along dim 1."""
    p = gq.pack(gq.quantize(w, fmt, block_size=block))
    n = w.shape[0]
    pw = PackedWeight(p.data.reshape(-1).view(torch.uint8), p.scale.view(torch.uint8).reshape(n, -1),
                      element_value_table(p.fmt), scale_table(E8M0), packed_gemm_params(p.fmt, n, w.shape[1], p.block_size))
    return pw, p.dequantize().float()


def same_bits(a, b):
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(a[~nan].view(torch.int32), b[~nan].view(torch.int32))


def rel_err(y, ref):
    return float((y.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


@pytest.mark.parametrize("name", FORMATS)
def test_value_table_is_the_format_decode(name):
    fmt = get_format(name)
    table = element_value_table(fmt)
    assert table.shape == (1 << fmt.bit_width,)
    codes = torch.arange(1 << fmt.bit_width)
    if isinstance(fmt, IntFormat):
        codes = torch.where(codes >= (1 << (fmt.bit_width - 1)), codes - (1 << fmt.bit_width), codes)
    assert same_bits(table, decode(codes.to(torch.int32), fmt))


def test_scale_tables_of_other_scale_formats():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import numpy as np
    from groupquant.formats import get_scale_format
    from groupquant.ops.packed_tables import scale_table
    t = scale_table(get_scale_format("ue4m3"))
    ref = np.arange(128, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert same_bits(t[:128], torch.from_numpy(ref)) and torch.isnan(t[127]) and torch.isnan(t[128:]).all()
    e5 = scale_table(get_scale_format("e5m0"))
    assert e5[15] == 1.0 and e5[0] == 2.0 ** -15 and e5[30] == 2.0 ** 15 and torch.isnan(e5[31:]).all()
    assert same_bits(scale_table(get_scale_format("e8m0")), gq.ops.e8m0_decode(torch.arange(256).to(torch.uint8)))


def test_scale_table_is_e8m0():
    t = scale_table(E8M0)
    assert t[127] == 1.0 and t[0] == 2.0 ** -127 and t[254] == 2.0 ** 127 and torch.isnan(t[255])


def test_fast_paths_are_chosen_where_proven():
    assert fast_decode(get_format("fp4_e2m1")).path == DECODE_NIBBLE_BF16
    assert fast_decode(get_format("fp8_e4m3")).path == DECODE_HALF
    assert fast_decode(get_format("fp8_e4m3")).nan_low7 == 0x7F
    assert fast_decode(get_format("fp8_e5m2")).path == DECODE_HALF
    assert fast_decode(get_format("int8")).path == DECODE_INT8
    assert fast_decode(get_format("fp6_e2m3")).path == DECODE_TABLE


def test_param_record_matches_extension():
    if not native.native_available(torch.device("cpu")):
        pytest.skip("native kernels not in use")
    assert tuple(torch.ops.groupquant.packed_gemm_param_fields().split(",")) == packed_field_names()


@pytest.mark.parametrize("name", FORMATS + ["int4"])
@pytest.mark.parametrize("shape,block", [((37, 70), 32), ((16, 256), 32), ((8, 48), 16), ((5, 130), 64)])
def test_decode_is_the_fake_quant_weight_bit_for_bit(name, shape, block):
    fmt = INT4 if name == "int4" else name
    torch.manual_seed(1)
    w = torch.randn(*shape) * torch.logspace(-3, 3, shape[1])
    pw, deq = packed_weight(fmt, w, block)
    assert same_bits(reference_packed_decode(pw), deq)
    assert same_bits(packed_decode(pw), deq)


@pytest.mark.parametrize("name", FORMATS + ["int4"])
@pytest.mark.parametrize("rows", [1, 2, 3, 7, 8, 9, 15, 16, 33, 256])
def test_linear_matches_f_linear_on_the_dequantized_weight(name, rows):
    fmt = INT4 if name == "int4" else name
    torch.manual_seed(rows)
    w, b = torch.randn(24, 100), torch.randn(24)
    pw, deq = packed_weight(fmt, w)
    x = torch.randn(rows, 100)
    ref = F.linear(x.double(), deq.double(), b.double())
    assert rel_err(packed_linear(x, pw, b), ref) < 1e-5
    assert rel_err(packed_linear(x, pw), F.linear(x.double(), deq.double())) < 1e-5


@pytest.mark.parametrize("block", [16, 32, 64])
@pytest.mark.parametrize("name", ["fp4_e2m1", "fp8_e4m3", "int8", "fp6_e3m2"])
def test_block_sizes_and_leading_dims(name, block):
    torch.manual_seed(block)
    w = torch.randn(19, 200)
    pw, deq = packed_weight(name, w, block)
    x = torch.randn(2, 3, 200)
    y = packed_linear(x, pw)
    assert y.shape == (2, 3, 19)
    assert rel_err(y, F.linear(x.double(), deq.double())) < 1e-5


@pytest.mark.parametrize("rows", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("name", ["fp4_e2m1", "fp8_e4m3", "int8", "fp6_e3m2"])
def test_blocks_of_16_in_pairs_of_a_run(name, rows):
    """Blocks of 16 with an even count (the streaming kernel's pairs) and an odd one (its fallback)."""
    for k in (192, 208):
        torch.manual_seed(rows + k)
        w = torch.randn(21, k) * torch.logspace(-4, 4, k, base=2.0)  # block scales differ along the row
        pw, deq = packed_weight(name, w, 16)
        x = torch.randn(rows, k)
        assert rel_err(packed_linear(x, pw), F.linear(x.double(), deq.double())) < 1e-5


@pytest.mark.parametrize("rows", [1, 2, 8, 17, 64])
def test_nvfp4_weight_with_ue4m3_table_and_global_scale(rows):
    from groupquant.ops.packed_tables import scale_table
    torch.manual_seed(rows)
    w = torch.randn(33, 256) * torch.logspace(-6, 6, 256, base=2.0)
    p = gq.pack(gq.quantize(w, "nvfp4"))
    pw = PackedWeight(p.data.reshape(-1).view(torch.uint8), p.scale.view(torch.uint8).reshape(33, -1),
                      element_value_table(p.fmt), scale_table(p.scale_format),
                      packed_gemm_params(p.fmt, 33, 256, 16, global_scale=float(p.tensor_scale), has_global_scale=True))
    deq = p.dequantize().float()
    assert same_bits(packed_decode(pw), deq)  # (q * s) * g, bit for bit
    x = torch.randn(rows, 256)
    assert rel_err(packed_linear(x, pw), F.linear(x.double(), deq.double())) < 1e-5


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 8, 64])
def test_half_inputs_accumulate_in_float32(dtype, rows):
    torch.manual_seed(0)
    pw, deq = packed_weight("fp4_e2m1", torch.randn(40, 96))
    x = torch.randn(rows, 96).to(dtype)
    y = packed_linear(x, pw)
    assert y.dtype == dtype
    ref = F.linear(x.float(), deq).to(dtype)  # float32 accumulation, one rounding to dtype
    assert rel_err(y, ref) < 2.0 ** -8


@pytest.mark.parametrize("name", ["fp4_e2m1", "fp8_e4m3", "fp8_e5m2", "int8", "fp6_e2m3"])
@pytest.mark.parametrize("rows", [1, 4, 32])
def test_nan_scale_makes_its_outputs_nan(name, rows):
    """A 0xFF E8M0 scale is NaN (OCP MX): its block, so every output of that row, is NaN."""
    torch.manual_seed(0)
    pw, deq = packed_weight(name, torch.randn(6, 64))
    pw.scale[2, 1] = 0xFF
    y = packed_linear(torch.randn(rows, 64), pw)
    assert torch.isnan(y[:, 2]).all()
    assert not torch.isnan(y[:, [0, 1, 3, 4, 5]]).any()
    assert torch.isnan(packed_decode(pw)[2, 32:]).all()


def test_e4m3_nan_code_decodes_to_nan():
    w = torch.randn(4, 64)
    p = gq.pack(gq.quantize(w, "fp8_e4m3"))
    data = p.data.view(torch.uint8).clone().reshape(4, -1)
    data[1, 5] = 0x7F
    data[3, 40] = 0xFF
    pw = PackedWeight(data.reshape(-1), p.scale.view(torch.uint8).reshape(4, -1), element_value_table(p.fmt),
                      scale_table(E8M0), packed_gemm_params(p.fmt, 4, 64, 32))
    for rows in (1, 3, 20):
        y = packed_linear(torch.randn(rows, 64), pw)
        assert torch.isnan(y[:, 1]).all() and torch.isnan(y[:, 3]).all() and not torch.isnan(y[:, [0, 2]]).any()


def test_reference_backend_gives_the_same(monkeypatch):
    torch.manual_seed(0)
    pw, deq = packed_weight("fp4_e2m1", torch.randn(10, 50))
    x = torch.randn(3, 50)
    native_y = packed_linear(x, pw)
    monkeypatch.setattr(native, "native_available", lambda device: False)
    assert rel_err(packed_linear(x, pw), native_y) < 1e-6


def test_bad_input_is_named():
    pw, _ = packed_weight("fp4_e2m1", torch.randn(4, 64))
    with pytest.raises(TypeError, match="dtype"):
        packed_linear(torch.randn(2, 64, dtype=torch.float64), pw)
    with pytest.raises(ValueError, match="64 features"):
        packed_linear(torch.randn(2, 63), pw)
    if native.native_available(torch.device("cpu")):
        bad = PackedWeight(pw.data[:-1].clone(), pw.scale, pw.value_table, pw.scale_table, pw.params)
        with pytest.raises(ValueError, match="packed data"):
            packed_linear(torch.randn(2, 64), bad)


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 40), n=st.integers(1, 20), k=st.integers(32, 150), name=st.sampled_from(FORMATS),
       seed=st.integers(0, 2 ** 16))
def test_property_linear_matches(rows, n, k, name, seed):
    torch.manual_seed(seed)
    pw, deq = packed_weight(name, torch.randn(n, k))
    x = torch.randn(rows, k)
    ref = F.linear(x.double(), deq.double())
    if float(ref.norm()) == 0.0:
        return
    assert rel_err(packed_linear(x, pw), ref) < 1e-5
