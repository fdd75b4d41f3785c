"""GroupQuantized: the fields, shapes and dtypes quantize() hands back, and its dequantize()."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import groupquant as gq


def test_fields_shapes_and_dtypes():
    x = torch.randn(3, 70, dtype=torch.bfloat16)
    q = gq.quantize(x, "fp6_e2m3", 32)
    assert q.shape == torch.Size([3, 70]) and q.block_size == 32 and q.dim == 1
    assert q.codes.shape == (3, 3, 32) and q.codes.dtype == torch.uint8
    assert q.scale.shape == (3, 3, 1) and q.scale.dtype == torch.float32
    assert q.scale_codes.shape == (3, 3, 1) and q.scale_codes.dtype == torch.uint8
    assert q.fmt == gq.get_format("fp6_e2m3") and q.dtype == torch.bfloat16
    assert (q.codes < 64).all()  # six-bit codes
    out = q.dequantize()
    assert out.dtype == torch.bfloat16 and out.shape == x.shape
    assert torch.equal(out, gq.fake_quant(x, "fp6_e2m3", 32))


def test_element_values_times_scale_is_the_contracted_output():
    x = torch.randn(4, 64) * 100
    q = gq.quantize(x, "fp8_e5m2", 32)
    el = q.element_values()
    assert el.shape == (4, 2, 32) and el.dtype == torch.float32
    assert torch.equal((el * q.scale).reshape(4, 64), gq.fake_quant(x, "fp8_e5m2", 32))
    assert torch.equal(gq.ops.e8m0_decode(q.scale_codes), q.scale)


def test_int_codes_and_float_scales():
    x = torch.randn(2, 256)
    q = gq.quantize(x, "int8", 128, scale_mode="float")
    assert q.codes.dtype == torch.int8 and q.scale_codes is None
    assert torch.equal(q.element_values(), q.codes.float() / 64)


def test_frozen_and_to_device():
    q = gq.quantize(torch.randn(2, 32), "fp4_e2m1")
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.scale = None
    moved = q.to(torch.device("cpu"))
    assert torch.equal(moved.codes, q.codes) and torch.equal(moved.scale_codes, q.scale_codes)
    assert moved.layout == q.layout and moved.fmt == q.fmt and moved.dtype == q.dtype
    qf = gq.quantize(torch.randn(2, 32), "fp4_e2m1", scale_mode="float")
    assert qf.to("cpu").scale_codes is None
