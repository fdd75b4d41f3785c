"""Linear layers from packed weights: ``y = x @ W^T + b`` with ``W`` decoded inside the kernel.

:class:`PackedWeight` is what the kernels read: the element-code stream and scale bytes of a
weight ``[N, K]`` grouped along ``K`` (the layout of :class:`groupquant.packing.PackedTensor`:
row-major codes, least significant bit first; one scale byte per block), the two decoding tables
(:mod:`.packed_tables`) and the parameter record (:mod:`.packed_gemm_params`).

:func:`packed_linear` runs the native kernel (C++ on CPU, CUDA on GPUs of a CUDA build) and
falls back to a PyTorch reference (decode the weight, ``F.linear``) when the extension is not in
use (``GROUPQUANT_BACKEND=reference`` or no compiler). Both accumulate in float32 and return
the input's dtype. :func:`packed_decode` gives the decoded weight (float32), bit for bit the
fake-quant weight.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import List, Optional

import torch
import torch.nn.functional as F

from . import native
from .bitstream import unpack_bits
from .packed_gemm_params import PackedGemmParams

__all__ = ["PackedWeight", "packed_linear", "packed_decode", "reference_packed_decode", "PACKED_INPUT_DTYPES"]

#: Input dtypes the packed kernels take.
PACKED_INPUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@dataclass(frozen=True)
class PackedWeight:
    """The tensors and record of one packed weight (all on one device).

    Fields:
        data: uint8 code stream, ``out_features * num_blocks * block_size * code_bits / 8`` bytes.
        scale: uint8 ``[out_features, num_blocks]`` scale bytes.
        value_table: float32 ``[2**code_bits]`` (code -> element value).
        scale_table: float32 ``[256]`` (scale byte -> scale).
        params: the record.
    """

    data: torch.Tensor
    scale: torch.Tensor
    value_table: torch.Tensor
    scale_table: torch.Tensor
    params: PackedGemmParams


@lru_cache(maxsize=1024)
def _op_params(params: PackedGemmParams) -> List[int]:
    """The packed ``int[] params`` of a record (remembered: a layer's record never changes)."""
    return params.pack()


def _codes(w: PackedWeight) -> torch.Tensor:
    """int32 codes ``[N, num_blocks * block_size]`` from the stream (the one decoder, LSB first)."""
    p = w.params
    count = p.out_features * p.num_blocks * p.block_size
    return unpack_bits(w.data.reshape(-1), p.code_bits, count).view(p.out_features, p.num_blocks * p.block_size)


def reference_packed_decode(w: PackedWeight) -> torch.Tensor:
    """The decoded weight ``[N, K]`` (float32) in PyTorch: ``(value * scale) [* global]``."""
    p = w.params
    values = w.value_table[_codes(w)]
    scale = w.scale_table[w.scale.reshape(p.out_features, p.num_blocks).to(torch.int64)]
    out = values.view(p.out_features, p.num_blocks, p.block_size) * scale.unsqueeze(-1)
    if p.has_global_scale:
        out = out * p.global_scale
    return out.reshape(p.out_features, -1)[:, :p.in_features]


def packed_decode(w: PackedWeight) -> torch.Tensor:
    """The decoded weight ``[N, K]`` float32 (native kernel's decode where in use)."""
    if native.serves(w.data.device):
        return torch.ops.groupquant.packed_decode(w.data, w.scale, w.value_table, w.scale_table, _op_params(w.params))
    return reference_packed_decode(w)


def packed_linear(x: torch.Tensor, w: PackedWeight, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``x @ W^T + bias`` for ``x [..., K]`` (float32 / bfloat16 / float16), float32 accumulation,
    output ``[..., N]`` in ``x``'s dtype. ``bias``: float32 ``[N]`` or None."""
    if x.dtype not in PACKED_INPUT_DTYPES:
        raise TypeError(f"packed linear takes input of dtype {[str(d) for d in PACKED_INPUT_DTYPES]}, got {x.dtype}")
    p = w.params
    if x.shape[-1] != p.in_features:
        raise ValueError(f"packed linear input must have {p.in_features} features (last dim), got shape "
                         f"{tuple(x.shape)}")
    lead = x.shape[:-1]
    x2 = x.reshape(-1, p.in_features)
    if native.serves(x.device):
        params = p.pack() if torch.compiler.is_compiling() else _op_params(p)
        y = torch.ops.groupquant.packed_linear(x2, w.data, w.scale, w.value_table, w.scale_table, bias, params)
    else:
        y = F.linear(x2.float(), reference_packed_decode(w), bias).to(x.dtype)
    return y.reshape(*lead, p.out_features)
