"""MXFP4 tensors of gpt-oss-style checkpoints as packed linear weights.

Layout (the published gpt-oss checkpoints; see openai/gpt-oss ``gpt_oss/torch/weights.py``, its
``FP4_VALUES`` table, and transformers' ``integrations/mxfp4.py``, ``convert_moe_packed_tensors``):

- ``<name>_blocks``: uint8 ``[..., rows, G, 16]``: for each of ``rows`` output rows, ``G`` blocks
  of 32 FP4 (E2M1) codes along the input dim, two codes per byte: byte ``b`` of a block holds
  element ``2b`` in its LOW nibble and element ``2b + 1`` in its HIGH nibble.
- ``<name>_scales``: uint8 ``[..., rows, G]``: one E8M0 byte per block, scale ``2**(s - 127)``.
- FP4 code -> value: ``[+0, .5, 1, 1.5, 2, 3, 4, 6, -0, -.5, -1, -1.5, -2, -3, -4, -6]`` (OCP
  E2M1: sign bit 3, two exponent bits with bias 1, one mantissa bit).
- The dequantized weight ``[rows, G * 32]`` is ``value * scale``; a linear layer computes
  ``x @ W^T`` with ``W = [rows, in]`` (transformers transposes the MoE expert stacks for its own
  matmul convention; here a ``[rows, G, 16]`` tensor is one linear weight of ``rows`` outputs).

This is exactly groupquant's packed MXFP4 layout (:mod:`groupquant.packing`: the code stream is
row-major ``[rows, G, 32]``, least significant bits first), so the bytes are used as they are.
One difference, documented: OCP E8M0 byte 0xFF is NaN here (gpt-oss' loader computes
``ldexp(v, 128)``); gpt-oss checkpoints do not use it.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from ...formats import get_format
from ...ops import GroupLayout
from ...nn.layers.group_quantized_weight import WeightNotGroupQuantized
from ...packing import E8M0_DTYPE, PackedTensor, pack
from ..errors import PackError
from ..inference.packed_linear import PackedLinear

__all__ = ["mxfp4_packed_tensor", "mxfp4_blocks", "mxfp4_linear", "MXFP4_BLOCK"]

#: Elements per block of a gpt-oss MXFP4 tensor.
MXFP4_BLOCK = 32


def mxfp4_packed_tensor(blocks: torch.Tensor, scales: torch.Tensor, in_features: Optional[int] = None,
                        dtype: torch.dtype = torch.bfloat16, name: str = "mxfp4") -> PackedTensor:
    """A PackedTensor ``[rows, in_features]`` (fp4_e2m1, blocks of 32 along the input dim) from one
    weight's ``blocks [rows, G, 16]`` and ``scales [rows, G]`` (uint8). ``in_features`` defaults to
    ``G * 32`` (a smaller value drops padding codes of the last block); ``dtype`` is what
    ``dequantize()`` returns. PackError names ``name`` and what does not fit."""
    if blocks.dtype != torch.uint8 or scales.dtype not in (torch.uint8, E8M0_DTYPE):
        raise PackError(f"{name}: MXFP4 blocks and scales must be uint8, got {blocks.dtype} and {scales.dtype}")
    if blocks.dim() != 3 or blocks.shape[-1] != MXFP4_BLOCK // 2:
        raise PackError(f"{name}: MXFP4 blocks must be [rows, G, 16] (one weight; index expert stacks first), got "
                        f"{tuple(blocks.shape)}")
    rows, groups = int(blocks.shape[0]), int(blocks.shape[1])
    if tuple(scales.shape) != (rows, groups):
        raise PackError(f"{name}: MXFP4 scales must be [rows, G] = {(rows, groups)}, got {tuple(scales.shape)}")
    in_features = groups * MXFP4_BLOCK if in_features is None else int(in_features)
    if not (groups - 1) * MXFP4_BLOCK < in_features <= groups * MXFP4_BLOCK:
        raise PackError(f"{name}: in_features={in_features} does not fit {groups} blocks of {MXFP4_BLOCK}")
    layout = GroupLayout.build(torch.Size((rows, in_features)), 1, MXFP4_BLOCK)
    data = blocks.contiguous().reshape(-1).clone()
    return PackedTensor(data, scales.contiguous().view(torch.uint8).clone().view(E8M0_DTYPE),
                        get_format("fp4_e2m1"), layout, dtype)


def mxfp4_blocks(packed: Union[PackedTensor, torch.nn.Module]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(blocks [rows, G, 16], scales [rows, G])`` uint8 of an fp4_e2m1 PackedTensor ``[rows, in]``
    in blocks of 32 with E8M0 scales (the inverse of :func:`mxfp4_packed_tensor`), or of a quant
    layer's weight (its ``group_quantized_weight()``: an MXFP4 ``QuantLinear`` or ``PackedLinear``)."""
    if isinstance(packed, torch.nn.Module):
        try:
            packed = pack(packed.group_quantized_weight())
        except (AttributeError, WeightNotGroupQuantized) as e:
            raise PackError(f"MXFP4 blocks need a quant layer with an MXFP4 weight: {e}") from None
    if packed.fmt != get_format("fp4_e2m1") or packed.block_size != MXFP4_BLOCK or len(packed.shape) != 2 \
            or packed.dim != 1 or not packed.power_of_two_scales:
        raise PackError(f"MXFP4 blocks need an fp4_e2m1 weight [rows, in] in blocks of 32 along dim 1 with E8M0 "
                        f"scales, got {packed.fmt.name} {tuple(packed.shape)} blocks of {packed.block_size} "
                        f"along dim {packed.dim}")
    rows, groups = int(packed.shape[0]), int(packed.scale.shape[1])
    return packed.data.reshape(rows, groups, MXFP4_BLOCK // 2).clone(), packed.scale.view(torch.uint8).clone()


def mxfp4_linear(blocks: torch.Tensor, scales: torch.Tensor, bias: Optional[torch.Tensor] = None, *,
                 in_features: Optional[int] = None, input_quant: Optional[torch.nn.Module] = None,
                 name: str = "mxfp4") -> PackedLinear:
    """A PackedLinear straight from a gpt-oss ``*_blocks`` / ``*_scales`` pair (and optional bias)."""
    packed = mxfp4_packed_tensor(blocks, scales, in_features, name=name)
    return PackedLinear.from_packed(packed, bias, input_quant=input_quant, name=name)
