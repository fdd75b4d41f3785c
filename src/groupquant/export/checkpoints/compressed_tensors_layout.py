"""One layer's weight in compressed-tensors' packed FP4 layout (``nvfp4-pack-quantized``, ``mxfp4-pack-quantized``).

Facts from compressed-tensors 0.20's own code (``compressors/nvfp4/``, ``compressors/mxfp4/``,
``compressors/mx_utils.py``, ``quantization/lifecycle/forward_helpers.py``):

- ``weight_packed``: uint8 ``[out, in / 2]``; byte ``b`` holds element ``2b`` in its low nibble and
  ``2b + 1`` in its high nibble (``unpack_fp4_from_uint8``), FP4 E2M1 codes (sign bit 3). This is
  groupquant's FP4 bit stream row by row, so the bytes are used as they are.
- ``weight_scale``: NVFP4 ``float8_e4m3fn [out, in / 16]`` (the UE4M3 bytes; sign bit 0); MXFP4
  ``uint8 [out, in / 32]``, E8M0 codes ``e + 127`` (``decompress_mx_scale``: ``2 ** (code - 127)``).
- ``weight_global_scale`` (NVFP4 only): float32 ``[1]``, the RECIPROCAL of groupquant's per-tensor
  scale ``g`` (compressed-tensors divides: the weight is ``e * (s / global_scale)``, computed in
  float32 from bfloat16 ``e`` and ``s`` and returned in bfloat16).

MXFP4 values ``e * 2**k`` are bfloat16 numbers, so the package decodes them exactly. NVFP4's
``e * (s / gs)`` rounds twice where groupquant's ``(e * s) * g`` rounds once; the writer takes the
float32 ``gs`` nearest ``1 / g`` (or, where that one does not, one of its float32 neighbours)
for which the package's own ``decompress`` gives groupquant's weight rounded to bfloat16, bit
for bit, and warns (naming the layer) where none does. groupquant's exact ``g`` is kept in the
file's metadata, so groupquant reads its own checkpoints back bit for bit; a foreign checkpoint's
``g`` is ``1 / gs`` in float32.
"""
from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import Dict, Optional

import torch

from ...formats import E8M0, get_format, get_scale_format
from ...ops import GroupLayout
from ...packing import PackedTensor
from ..errors import CheckpointError

__all__ = ["CTScheme", "ct_scheme_of", "ct_layer_tensors", "packed_from_ct", "NVFP4_CT", "MXFP4_CT"]


@dataclass(frozen=True)
class CTScheme:
    """A compressed-tensors weight scheme groupquant writes: its format name, its preset in
    ``compressed_tensors.quantization.quant_scheme`` and the block / scale format it holds."""

    format: str
    preset: str
    block_size: int
    scale_format: str
    tensor_scale: bool


NVFP4_CT = CTScheme("nvfp4-pack-quantized", "NVFP4A16", 16, "ue4m3", True)
MXFP4_CT = CTScheme("mxfp4-pack-quantized", "MXFP4A16", 32, "e8m0", False)
_SCHEMES = (NVFP4_CT, MXFP4_CT)


def ct_scheme_of(p: PackedTensor, where: str) -> CTScheme:
    """The scheme that holds packed weight ``p``; CheckpointError names the layer and its format otherwise."""
    fp4 = get_format("fp4_e2m1")
    for s in _SCHEMES:
        if (p.fmt == fp4 and p.block_size == s.block_size and p.scale_format == get_scale_format(s.scale_format)
                and (p.tensor_scale is not None) == s.tensor_scale):
            if len(p.shape) != 2 or p.dim != 1 or p.shape[1] % s.block_size:
                raise CheckpointError(f"{where}: compressed-tensors {s.format} holds a 2-D weight [out, in] grouped "
                                      f"along in, with in a multiple of {s.block_size}; got shape {tuple(p.shape)} "
                                      f"grouped along dim {p.dim}")
            return s
    ts = "with" if p.tensor_scale is not None else "without"
    raise CheckpointError(f"{where}: compressed-tensors checkpoints hold NVFP4 (fp4_e2m1, blocks of 16, ue4m3 scales "
                          f"and a tensor scale) and MXFP4 (fp4_e2m1, blocks of 32, e8m0 scales) weights; this layer's "
                          f"weight is {p.fmt.name} in blocks of {p.block_size} with {p.scale_format.name} scales, "
                          f"{ts} a tensor scale")


def _check_finite(p: PackedTensor, where: str) -> None:
    """CheckpointError where a block scale is NaN (a NaN or Inf weight): the format has no NaN code."""
    nan_code = p.scale_format.nan_code
    if nan_code is not None and bool((p.scale.view(torch.uint8) == nan_code).any()):
        raise CheckpointError(f"{where}: the weight has NaN or Inf in a block (NaN block scale); compressed-tensors "
                              "cannot hold it")


def _decompressed(scheme: CTScheme, tensors: Dict[str, torch.Tensor]) -> torch.Tensor:
    """The weight compressed-tensors' own compressor decodes from ``tensors`` (bfloat16)."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    qs = QuantizationScheme(targets=["Linear"], format=scheme.format, **PRESET_SCHEMES[scheme.preset])
    return BaseCompressor.get_value_from_registry(scheme.format).decompress(dict(tensors), qs)["weight"]


def _global_scale(p: PackedTensor, tensors: Dict[str, torch.Tensor], where: str) -> torch.Tensor:
    """float32 ``[1]`` global scale: ``1 / g`` or a float32 neighbour with which the package decodes
    groupquant's weight (rounded to bfloat16) bit for bit; the nearest one, with a warning, if none does."""
    q = p.unpack()
    want = dataclasses.replace(q, dtype=torch.float32).dequantize().to(torch.bfloat16)
    base = (torch.ones(1, device=p.tensor_scale.device) / p.tensor_scale.reshape(1)).float()
    candidates, up, down = [base], base, base
    for _ in range(3):
        up, down = torch.nextafter(up, torch.full_like(up, float("inf"))), torch.nextafter(down, torch.zeros_like(down))
        candidates += [up, down]
    for gs in candidates:
        if torch.equal(_decompressed(NVFP4_CT, dict(tensors, weight_global_scale=gs)), want):
            return gs
    got = _decompressed(NVFP4_CT, dict(tensors, weight_global_scale=base))
    warnings.warn(f"{where}: compressed-tensors decodes {int((got != want).sum())} of {want.numel()} NVFP4 weights "
                  "one bfloat16 step away from groupquant's (its e * (s / global_scale) rounds twice; no float32 "
                  "global scale near 1 / tensor_scale decodes them all exactly)", UserWarning, stacklevel=4)
    return base


def ct_layer_tensors(p: PackedTensor, where: str) -> Dict[str, torch.Tensor]:
    """``weight_packed``, ``weight_scale`` (and ``weight_global_scale``) of packed weight ``p`` of layer ``where``."""
    scheme = ct_scheme_of(p, where)
    _check_finite(p, where)
    out_features, in_features = int(p.shape[0]), int(p.shape[1])
    scale = p.scale.view(torch.uint8).reshape(out_features, in_features // scheme.block_size)
    tensors = {"weight_packed": p.data.reshape(out_features, in_features // 2).clone(),
               "weight_scale": scale.view(torch.float8_e4m3fn) if scheme is NVFP4_CT else scale.clone()}
    if scheme is NVFP4_CT:
        tensors["weight_global_scale"] = _global_scale(p, tensors, where)
    return tensors


def packed_from_ct(tensors: Dict[str, torch.Tensor], where: str, dtype: torch.dtype,
                   tensor_scale: Optional[torch.Tensor] = None) -> PackedTensor:
    """The PackedTensor of one layer's compressed-tensors ``weight_packed`` / ``weight_scale`` /
    ``weight_global_scale`` (NVFP4 when the global scale is there, else MXFP4); ``tensor_scale``
    (groupquant's exact ``g``) overrides ``1 / weight_global_scale``."""
    packed, scale = tensors["weight_packed"], tensors["weight_scale"]
    if packed.dtype != torch.uint8 or packed.dim() != 2 or scale.dim() != 2 or scale.shape[0] != packed.shape[0]:
        raise CheckpointError(f"{where}: weight_packed must be uint8 [out, in / 2] and weight_scale [out, groups], got "
                              f"{packed.dtype} {tuple(packed.shape)} and {scale.dtype} {tuple(scale.shape)}")
    scheme = NVFP4_CT if "weight_global_scale" in tensors else MXFP4_CT
    out_features, in_features = int(packed.shape[0]), int(packed.shape[1]) * 2
    if in_features != scale.shape[1] * scheme.block_size:
        raise CheckpointError(f"{where}: {scheme.format} weight_scale {tuple(scale.shape)} does not fit weight_packed "
                              f"{tuple(packed.shape)} (one scale per {scheme.block_size} elements)")
    sf = E8M0 if scheme is MXFP4_CT else get_scale_format("ue4m3")
    ts = None
    if scheme is NVFP4_CT:
        ts = tensor_scale if tensor_scale is not None else (1.0 / tensors["weight_global_scale"].float().reshape(()))
        ts = ts.float().reshape(())
    layout = GroupLayout.build(torch.Size((out_features, in_features)), 1, scheme.block_size)
    return PackedTensor(packed.reshape(-1).contiguous(), scale.contiguous().view(torch.uint8).view(sf.storage_dtype),
                        get_format("fp4_e2m1"), layout, dtype, sf, ts)
