"""GGUF MXFP4 / NVFP4 block layouts: the gguf package's dequantizer decodes what gguf_blocks lays
out to element value * scale, computed independently in float64 (OCP E2M1 table, E8M0 / UE4M3 by formula)."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupquant.export.checkpoints.gguf_blocks import GGUFBlocks, codes_of_mxfp4_rows, codes_of_nvfp4_rows, mxfp4_rows, nvfp4_rows

gguf = pytest.importorskip("gguf", reason="the GGUF block tests need the gguf package")

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(code: int) -> float:
    return (-1.0 if code & 8 else 1.0) * E2M1[code & 7]


def ue4m3(byte: int) -> float:
    e, m = byte >> 3, byte & 7
    return m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)


def blocks(seed, rows, k, block, max_scale_code):
    """Random codes 0..15 and scale codes 0..max_scale_code (seeded)."""
    gen = torch.Generator().manual_seed(seed)
    return GGUFBlocks(torch.randint(0, 16, (rows, k, block), generator=gen, dtype=torch.uint8),
                      torch.randint(0, max_scale_code + 1, (rows, k), generator=gen, dtype=torch.uint8))


def expected(b: GGUFBlocks, scale) -> np.ndarray:
    rows, k, block = b.codes.shape
    out = np.zeros((rows, k * block))
    for r in range(rows):
        for g in range(k):
            for i in range(block):
                out[r, g * block + i] = e2m1(int(b.codes[r, g, i])) * scale(int(b.scales[r, g]))
    return out


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 3))
def test_mxfp4_blocks_decode_as_gguf_reads_them(seed, rows, k):
    # E8M0 codes up to 252 (2**125: groupquant's cap for float32 input; 6 * 2**126 overflows float32)
    b = blocks(seed, rows, k, 32, 252)
    laid = mxfp4_rows(b)
    got = gguf.quants.dequantize(laid.numpy(), gguf.GGMLQuantizationType.MXFP4)
    assert np.array_equal(got.astype(np.float64), expected(b, lambda s: 2.0 ** (s - 127)))
    back = codes_of_mxfp4_rows(laid)
    assert torch.equal(back.codes, b.codes) and torch.equal(back.scales, b.scales)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 3), st.integers(1, 2))
def test_nvfp4_blocks_decode_as_gguf_reads_them(seed, rows, super_blocks):
    b = blocks(seed, rows, 4 * super_blocks, 16, 126)  # every UE4M3 code but NaN (0x7F)
    laid = nvfp4_rows(b)
    got = gguf.quants.dequantize(laid.numpy(), gguf.GGMLQuantizationType.NVFP4)
    assert np.array_equal(got.astype(np.float64), expected(b, ue4m3))
    back = codes_of_nvfp4_rows(laid)
    assert torch.equal(back.codes, b.codes) and torch.equal(back.scales, b.scales)
