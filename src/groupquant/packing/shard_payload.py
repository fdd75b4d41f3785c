"""The bytes one rank contributes to an all-gather of a group-quantized weight, and the weight
they add up to.

A weight ``[O, I]`` split along dim 0 (FSDP2's shards: rank ``r`` holds rows ``[r*R, (r+1)*R)``)
is quantized shard by shard into two byte streams, **element codes** packed back to back at the
format's width (:func:`groupquant.packing.pack_bits`: two FP4 codes per byte) and **scale codes**
(one E8M0 / UE4M3 byte per block), in row-major order of the contracted layout. Each shard's
streams are whole bytes and its blocks lie inside its rows, so the streams of ranks ``0..W-1``
laid end to end (what an all-gather along dim 0 produces) are the streams of the whole weight:
:func:`decode_gathered` reads them back into a :class:`groupquant.ops.GroupQuantized` equal, bit
for bit, to ``quantize`` of the whole float weight with the same settings.

Rules (checked, errors name the setting):

- blocks along dim 1 (a forward weight ``[O, I]``): any row split; blocks along dim 0 (the weight
  of the input-gradient GEMM, grouped over ``O``): every shard's row count a multiple of the block.
- a two-level scale (NVFP4's float32 tensor scale ``g = amax / (448 * 6)``) needs the amax of the
  whole weight: the caller reduces the shards' amaxes (:func:`shard_amax`) and passes the result;
  the shard is quantized with the tensor scale of that amax (one block of extra rows carrying it
  is quantized with the shard and dropped, so ``g`` comes from the quantize op itself).
- the scale format must store codes (E8M0, E{k}M0, UE4M3): float32 scales are not MX.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Tuple

import torch

from ..formats import ElementFormat, IntFormat, ScaleFormat
from ..inject import ConfigError
from ..ops import GroupQuantized, OpSettings, code_dtype, quantize_spec
from ..ops.bitstream import pack_bits, packed_nbytes, unpack_bits
from ..ops.denormals import keeping_denormals
from ..ops.packed_tables import element_value_table

__all__ = ["ShardCodec", "ShardPayload", "encode_shard", "decode_gathered", "dequantize_gathered", "shard_amax"]


@dataclass(frozen=True)
class ShardCodec:
    """The quantize-op settings of one weight quantization (:class:`groupquant.ops.OpSettings`,
    from the quantizer's own :meth:`~groupquant.core.QuantSpec.op_settings`), checked for the
    all-gather: group-wise blocks (``settings.dim`` 1: along the input features, 0: along the
    output features; ``settings.block_size`` elements) and scale codes."""

    settings: OpSettings

    @classmethod
    def of(cls, spec: Any, ndim: int, where: str) -> "ShardCodec":
        """The codec of a resolved :class:`groupquant.core.QuantSpec` (group-wise, coded scales)
        for a weight of ``ndim`` dims; ``where`` starts the error message."""
        if not spec.is_group:
            raise ConfigError("scaling_per_output", f"{where}: {spec.name} scales per {spec.granularity}; the "
                                                    "quantized all-gather needs group-wise (MX / NVFP4) scales")
        scale_format = spec.scale_format
        if scale_format is None or not scale_format.is_coded:
            raise ConfigError("scale_format", f"{where}: {spec.name} keeps {getattr(scale_format, 'name', 'float32')} "
                                              "scales, not codes; the quantized all-gather moves scale bytes "
                                              "(E8M0, UE4M3)")
        settings = spec.op_settings(ndim)
        if settings.block_size is None:
            raise ConfigError("group_size", f"{where}: {spec.name} has group_size=None (the whole dim); the quantized "
                                            "all-gather needs blocks of a fixed size")
        return cls(settings)

    def payload_nbytes(self, shape: Tuple[int, ...]) -> int:
        """Bytes of a shard of ``shape`` (element codes + scale codes)."""
        layout = self.settings.layout_of(shape)
        nbytes = packed_nbytes(math.prod(layout.contracted_shape), self.settings.fmt.bit_width)
        return nbytes + math.prod(layout.scale_shape)


@dataclass(frozen=True)
class ShardPayload:
    """One shard's all-gather inputs: packed element codes and scale codes (1-D uint8 each), and
    the float32 tensor scale (0-d; the same on every rank) or None."""

    codes: torch.Tensor
    scales: torch.Tensor
    tensor_scale: Optional[torch.Tensor] = None


def shard_amax(shard: torch.Tensor) -> torch.Tensor:
    """``max |x|`` of a shard (float32, 0-d; NaN when it holds a NaN, as ``tensor_scale_of`` reads it)."""
    if shard.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=shard.device)
    lo, hi = torch.aminmax(shard.detach())
    return torch.maximum(hi.float(), -lo.float())


def _check_rows(shard: torch.Tensor, codec: ShardCodec, where: str) -> None:
    """A block must lie inside the shard's rows and its code stream end on a byte."""
    rows = shard.shape[0]
    if codec.settings.dim == 0 and rows % codec.settings.block_size:
        raise ConfigError("group_size", f"{where}: a shard of {rows} rows splits blocks of {codec.settings.block_size} "
                                        "along dim 0 (the all-gather's dim); shard rows must be a multiple of the "
                                        "block (choose the world size or the layer's out_features so that they are)")
    if (shard.numel() * codec.settings.fmt.bit_width) % 8:
        raise ConfigError("bit_width", f"{where}: a shard of shape {tuple(shard.shape)} at "
                                       f"{codec.settings.fmt.bit_width} bits does not end on a byte")


def _quantize(x: torch.Tensor, codec: ShardCodec) -> GroupQuantized:
    """``x`` quantized by the codec's op settings (the quantizer's own, checked when it was resolved)."""
    return quantize_spec(x, codec.settings.group_spec(x))


def _with_amax_rows(shard: torch.Tensor, amax: torch.Tensor, codec: ShardCodec) -> torch.Tensor:
    """``shard`` and one block of extra rows (one row when blocks run along dim 1) whose first
    element is ``amax``: the tensor's amax becomes ``amax`` and no block of the shard changes."""
    extra = codec.settings.block_size if codec.settings.dim == 0 else 1
    pad = shard.new_zeros((extra,) + tuple(shard.shape[1:]))
    pad.view(-1)[0] = amax.to(shard.dtype)
    return torch.cat([shard, pad])


def encode_shard(shard: torch.Tensor, codec: ShardCodec, global_amax: Optional[torch.Tensor] = None,
                 where: str = "all-gather") -> ShardPayload:
    """The all-gather inputs of one row shard (``[R, I]``, the dtype the weight is quantized in).

    ``global_amax``: the whole weight's amax (0-d), needed when ``codec.settings.tensor_scale``."""
    _check_rows(shard, codec, where)
    with torch.no_grad():
        if codec.settings.tensor_scale:
            if global_amax is None:
                raise ValueError(f"{where}: a two-level scale needs the whole weight's amax (global_amax)")
            q = _quantize(_with_amax_rows(shard, global_amax, codec), codec)
            keep = shard.shape[0] if codec.settings.dim != 0 else shard.shape[0] // codec.settings.block_size
            codes, scale_codes = q.codes[:keep], q.scale_codes[:keep]
        else:
            q = _quantize(shard, codec)
            codes, scale_codes = q.codes, q.scale_codes
        if codec.settings.fmt.bit_width == 8:
            stream = codes.reshape(-1).view(torch.uint8)
        else:
            stream = pack_bits(codes, codec.settings.fmt.bit_width)
        return ShardPayload(stream.contiguous(), scale_codes.reshape(-1).contiguous(), q.tensor_scale)


def decode_gathered(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: Optional[torch.Tensor],
                    codec: ShardCodec, shape: Tuple[int, ...], dtype: torch.dtype) -> GroupQuantized:
    """The group-quantized weight of ``shape`` from the gathered streams (every rank's
    :class:`ShardPayload` laid end to end); ``dtype``: the dtype it dequantizes to."""
    layout = codec.settings.layout_of(shape)
    count = math.prod(layout.contracted_shape)
    fmt = codec.settings.fmt
    if fmt.bit_width == 8:
        element_codes = codes.view(code_dtype(fmt))
    else:
        signed = isinstance(fmt, IntFormat) and fmt.signed
        element_codes = unpack_bits(codes, fmt.bit_width, count, signed=signed).to(code_dtype(fmt))
    scale_codes = scales.view(layout.scale_shape)
    scale = codec.settings.scale_format.decode(scale_codes).float()
    return GroupQuantized(codes=element_codes.view(layout.contracted_shape), scale=scale, scale_codes=scale_codes,
                          fmt=fmt, layout=layout, dtype=dtype, scale_format=codec.settings.scale_format,
                          tensor_scale=tensor_scale if codec.settings.tensor_scale else None)


def _element_values(codes: torch.Tensor, fmt: ElementFormat, count: int) -> torch.Tensor:
    """float32 element values of a gathered code stream, read from the format's value table
    (entry ``c`` is exactly ``groupquant.ops.decode`` of bit pattern ``c``): one gather instead
    of the arithmetic decode, the same values bit for bit."""
    if fmt.bit_width == 8:
        patterns = codes.to(torch.int64)
    else:
        patterns = unpack_bits(codes, fmt.bit_width, count).to(torch.int64)
    table = element_value_table(fmt).to(codes.device)
    return table[patterns]


def dequantize_gathered(codes: torch.Tensor, scales: torch.Tensor, tensor_scale: Optional[torch.Tensor],
                        codec: ShardCodec, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """``decode_gathered(...).dequantize()``: ``(element * scale) * tensor_scale`` in ``shape`` and
    ``dtype`` (:meth:`groupquant.ops.GroupQuantized.dequantize`'s rule, subnormals kept), with the
    element values from the format's value table."""
    layout = codec.settings.layout_of(shape)
    count = math.prod(layout.contracted_shape)
    elements = _element_values(codes, codec.settings.fmt, count).view(layout.contracted_shape)
    scale = codec.settings.scale_format.decode(scales.view(layout.scale_shape)).float()

    def values() -> torch.Tensor:
        out = elements * scale
        out = out if not codec.settings.tensor_scale else out * tensor_scale
        return layout.expand(out).to(dtype)
    return keeping_denormals(values)
