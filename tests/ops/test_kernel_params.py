"""The native ops' parameter record: built from a spec in one place, packed in field order."""
from __future__ import annotations

import dataclasses
import struct

import pytest
import torch

from groupquant.formats import FloatFormat, IntFormat, SpecialValues
from groupquant.ops import make_spec
from groupquant.ops.kernel_params import KernelParams, field_index, field_names, kernel_params, op_params


def test_pack_follows_field_order_with_floats_as_float32_bits():
    x = torch.randn(4, 70)
    rec = kernel_params(make_spec(x, "fp8_e4m3", 32, 1, "stochastic", "rceil", seed=2 ** 32 + 5), torch.float16)
    packed = rec.pack()
    assert len(packed) == len(dataclasses.fields(KernelParams)) == len(field_names())
    assert packed[field_index("max_normal")] == 0x43E00000  # 448.0 as float32
    assert struct.unpack("<f", struct.pack("<I", packed[field_index("max_normal")]))[0] == 448.0
    assert packed[field_index("dim")] == 1 and packed[field_index("block_size")] == 32
    assert packed[field_index("rounding")] == 3 and packed[field_index("scale_mode")] == 3
    assert packed[field_index("seed")] == 5  # taken mod 2**32
    assert packed[field_index("exp_max")] == 15 - 8  # float16's largest binade minus e4m3's emax
    assert packed[field_index("saturating")] == 1 and packed[field_index("nan_code")] == 0x7F
    assert all(type(v) is int for v in packed)
    assert op_params(make_spec(x, "fp8_e4m3", 32, 1, "stochastic", "rceil", seed=5), torch.float16) == packed


@pytest.mark.parametrize("fmt,special,nan_code,negative_zero", [
    (FloatFormat(5, 2), 1, 0x7E, True), (FloatFormat(4, 3, SpecialValues.FNUZ), 3, 0x80, False),
    (FloatFormat(2, 1), 0, -1, True), (IntFormat(8), 0, -1, False)])
def test_format_fields_come_from_the_format(fmt, special, nan_code, negative_zero):
    x = torch.randn(2, 32)
    rec = kernel_params(make_spec(x, fmt), torch.float32)
    assert (rec.special, rec.nan_code, rec.negative_zero) == (special, nan_code, negative_zero)
    assert rec.max_normal == fmt.max_normal and rec.emax == fmt.emax and rec.is_float == fmt.is_float
    if fmt.has_nan:
        assert kernel_params(make_spec(x, fmt, saturating=False), torch.float32).saturating is False
