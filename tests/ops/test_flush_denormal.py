"""Results never depend on torch.set_flush_denormal: every path gives the same bits with it on and
off (subnormal inputs, blocks whose scale is tiny), and the library leaves the global as it found it."""
from __future__ import annotations

from typing import Callable, Dict

import pytest
import torch

import groupquant as gq
from groupquant.ops import make_spec, native, reference_fake_quant, reference_quantize
from groupquant.ops.denormals import flush_denormal_enabled
from groupquant.ops.native_ops import native_fake_quant, native_fake_quant_with_scale, native_quantize


def _flush_supported() -> bool:
    try:
        return bool(torch.set_flush_denormal(True))
    finally:
        torch.set_flush_denormal(False)


pytestmark = pytest.mark.skipif(not _flush_supported(), reason="this CPU cannot flush denormals")


def tiny_input(dtype: torch.dtype) -> torch.Tensor:
    """Rows of subnormals of ``dtype``, of float32 subnormals, and tiny normals whose E8M0 scale
    clamps at 2**-127 (a subnormal float32), so elements and results are subnormal."""
    gen = torch.Generator().manual_seed(1)
    tiny = torch.finfo(dtype).tiny
    rows = [
        torch.randn(64, generator=gen) * tiny / 8,                 # subnormal in dtype
        torch.randn(64, generator=gen) * 2.0 ** -135,               # float32 subnormals
        torch.randn(64, generator=gen) * 2.0 ** -118,               # scale 2**-127: subnormal products
        torch.randn(64, generator=gen) * 2.0 ** -124,
    ]
    return torch.stack(rows).to(dtype)


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = torch.where(torch.isnan(t), torch.full_like(t, float("nan")), t)
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


def _paths(fmt: str) -> Dict[str, Callable[[torch.Tensor], torch.Tensor]]:
    """Every way to quantize, each returning one tensor of bits to compare."""
    paths = {
        "fake_quant": lambda x: gq.fake_quant(x, fmt),
        "fake_quant_with_scale": lambda x: gq.ops.fake_quant_with_scale(x, fmt, rounding="nearest").value,
        "scale": lambda x: gq.ops.fake_quant_with_scale(x, fmt).scale,
        "quantize": lambda x: gq.quantize(x, fmt).dequantize(),
        "quantize_codes": lambda x: gq.quantize(x, fmt, dim=0).codes,
        "reference": lambda x: reference_fake_quant(x, make_spec(x, fmt))[0],
        "reference_codes": lambda x: reference_quantize(x, make_spec(x, fmt)).codes,
        "reference_dequantize": lambda x: reference_quantize(x, make_spec(x, fmt, scale_mode="ceil")).dequantize(),
        "stochastic": lambda x: gq.fake_quant(x, fmt, rounding="stochastic", seed=3),
    }
    if native.load():
        paths.update({
            "native": lambda x: native_fake_quant(x, make_spec(x, fmt, 16)),
            "native_with_scale": lambda x: native_fake_quant_with_scale(x, make_spec(x, fmt, None, 0)).value,
            "native_codes": lambda x: native_quantize(x, make_spec(x, fmt)).codes,
        })
    return paths


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1", "int8", "fp8_e5m2"])
def test_every_path_gives_the_same_bits_with_flush_denormal_on_and_off(fmt, dtype):
    x = tiny_input(dtype)
    paths = _paths(fmt)
    off = {name: fn(x) for name, fn in paths.items()}
    assert (off["fake_quant"] != 0).any()  # subnormal results exist, so flushing them would show
    try:
        assert torch.set_flush_denormal(True)
        for name, fn in paths.items():
            got = fn(x)
            want = off[name]
            if got.is_floating_point():
                assert torch.equal(_bits(got), _bits(want)), f"{name} changed under flush-denormal ({fmt}, {dtype})"
            else:
                assert torch.equal(got, want), f"{name} changed under flush-denormal ({fmt}, {dtype})"
            assert flush_denormal_enabled(), f"{name} left flush-denormal off"
    finally:
        torch.set_flush_denormal(False)
    assert not flush_denormal_enabled()


def test_probe_sees_the_global():
    try:
        torch.set_flush_denormal(True)
        assert flush_denormal_enabled()
    finally:
        torch.set_flush_denormal(False)
    assert not flush_denormal_enabled()
