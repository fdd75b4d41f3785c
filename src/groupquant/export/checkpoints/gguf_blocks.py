"""GGUF's MXFP4 and NVFP4 block layouts, to and from groupquant's element and scale codes.

Facts from the ``gguf`` package 0.19 (``gguf/quants.py``: ``MXFP4.dequantize_blocks``,
``NVFP4.dequantize_blocks``; ``gguf/constants.py``: ``GGML_QUANT_SIZES``), which mirror llama.cpp's
``block_mxfp4`` / ``block_nvfp4``:

- MXFP4 (type 39): blocks of 32 elements in 17 bytes: one E8M0 byte (``2**(e - 127)``; the
  reader computes it as half that times doubled FP4 values, the same product), then 16 bytes where
  byte ``i`` holds element ``i`` in its LOW nibble and element ``i + 16`` in its HIGH nibble.
  E8M0 0xFF is not NaN there (it decodes to ``2**128``), so a NaN block cannot be written.
- NVFP4 (type 40): super-blocks of 64 elements in 36 bytes: four UE4M3 bytes (one per 16
  elements, bias 7, subnormals ``m * 2**-9``; 0x7F decodes to 0, so NaN cannot be written), then
  four groups of 8 bytes, group ``j`` holding elements ``16j + i`` (low nibble) and ``16j + i + 8``
  (high nibble). The per-tensor scale is not part of the type: llama.cpp reads it from a separate
  F32 tensor ``<name>.scale`` (one element) and multiplies the matmul output by it.
- FP4 codes are OCP E2M1 (sign bit 3), groupquant's codes as they are.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["GGUFBlocks", "mxfp4_rows", "nvfp4_rows", "codes_of_mxfp4_rows", "codes_of_nvfp4_rows"]


@dataclass(frozen=True)
class GGUFBlocks:
    """Element codes ``[rows, k, block]`` (uint8, 0..15) and scale codes ``[rows, k]`` (uint8) of one weight."""

    codes: torch.Tensor
    scales: torch.Tensor


def mxfp4_rows(b: GGUFBlocks) -> torch.Tensor:
    """uint8 ``[rows, k * 17]``: GGUF MXFP4 blocks of codes in blocks of 32."""
    c = b.codes
    qs = c[..., :16] | (c[..., 16:] << 4)
    return torch.cat([b.scales.unsqueeze(-1), qs], dim=-1).reshape(c.shape[0], -1)


def codes_of_mxfp4_rows(rows: torch.Tensor) -> GGUFBlocks:
    """Inverse of :func:`mxfp4_rows` (``rows``: uint8 ``[rows, k * 17]``)."""
    blocks = rows.reshape(rows.shape[0], -1, 17)
    qs = blocks[..., 1:]
    return GGUFBlocks(torch.cat([qs & 0x0F, qs >> 4], dim=-1).contiguous(), blocks[..., 0].contiguous())


def nvfp4_rows(b: GGUFBlocks) -> torch.Tensor:
    """uint8 ``[rows, k / 4 * 36]``: GGUF NVFP4 super-blocks of codes in blocks of 16 (k a multiple of 4)."""
    n = b.codes.shape[0]
    c = b.codes.reshape(n, -1, 4, 16)
    qs = (c[..., :8] | (c[..., 8:] << 4)).reshape(n, -1, 32)
    return torch.cat([b.scales.reshape(n, -1, 4), qs], dim=-1).reshape(n, -1)


def codes_of_nvfp4_rows(rows: torch.Tensor) -> GGUFBlocks:
    """Inverse of :func:`nvfp4_rows` (``rows``: uint8 ``[rows, k / 4 * 36]``)."""
    n = rows.shape[0]
    blocks = rows.reshape(n, -1, 36)
    qs = blocks[..., 4:].reshape(n, -1, 4, 8)
    codes = torch.cat([qs & 0x0F, qs >> 4], dim=-1).reshape(n, -1, 16)
    return GGUFBlocks(codes.contiguous(), blocks[..., :4].reshape(n, -1).contiguous())
