"""Packed group-quantized tensors: element codes in the format's bits, one scale per group.

:func:`pack` turns a :class:`~groupquant.ops.GroupQuantized` (the result of
``groupquant.quantize``) into a :class:`PackedTensor`; :meth:`PackedTensor.unpack` gives the
same ``GroupQuantized`` back, bit for bit. Layout of the two tensors:

- ``data`` (elements). The codes are read in the row-major order of the contracted shape
  ``S[:d] + (k, block_size) + S[d+1:]`` (a zero-padded last group included). 8-bit formats keep
  that shape, one code per byte, typed (see :mod:`.storage_dtypes`); other widths are a 1-D
  ``uint8`` bit stream, least significant bit first (see :mod:`groupquant.ops.bitstream`: FP4 puts the first
  element in the low nibble, FP6 puts four elements in three bytes).
- ``scale``. Shape ``S[:d] + (k,) + S[d+1:]`` (one per group; ``[O, k]`` for a weight grouped
  along its last dim), in the scale format's storage (:func:`.storage_dtypes.scale_storage_dtype`):
  E8M0 bytes ``e + 127`` for a scale ``2**e`` (0xFF = NaN), typed ``torch.float8_e8m0fnu`` where
  torch has it, else ``uint8``; E{k}M0 codes ``e + 2**(k-1) - 1`` as ``uint8``; UE4M3 bytes
  (NVFP4) as ``torch.float8_e4m3fn``; other unsigned minifloats ``uint8``; bfloat16 scales as
  ``bfloat16``; float32 scales (``scale_mode='float'``) as ``float32``.
- ``tensor_scale``. The per-tensor float32 second scale of two-level scaling (NVFP4), 0-d, or None.

NVFP4 of a ``[4096, 4096]`` weight: 4096*4096/2 element bytes + 4096*4096/16 UE4M3 bytes + 4
bytes of tensor scale (4.5 bits per element).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Union

import torch

from ..formats import E8M0, FLOAT32_SCALE, ElementFormat, IntFormat, ScaleFormat
from ..ops import GroupLayout, GroupQuantized, code_dtype, decode_scale
from ..ops.bitstream import pack_bits, packed_nbytes, unpack_bits
from .format_record import format_from_record, format_record, scale_format_from_record, scale_format_record
from .storage_dtypes import element_storage_dtype, is_byte_format, scale_storage_dtype

__all__ = ["PackedTensor", "pack"]

_DTYPES = {str(d): d for d in (torch.float32, torch.bfloat16, torch.float16)}


def _packed_data_shape(fmt: ElementFormat, layout: GroupLayout) -> tuple:
    """Shape of the element tensor: contracted for byte formats, else the stream length."""
    if is_byte_format(fmt):
        return layout.contracted_shape
    return (packed_nbytes(int(torch.Size(layout.contracted_shape).numel()), fmt.bit_width),)


def _packed_scale_shape(layout: GroupLayout) -> tuple:
    """``S[:d] + (k,) + S[d+1:]``: the scale shape without the block's unit dim."""
    return layout.shape[:layout.dim] + (layout.num_groups,) + layout.shape[layout.dim + 1:]


def _default_scale_format(scale: torch.Tensor) -> ScaleFormat:
    """The scale format of packed scales that name none (records from before scale formats):
    E8M0 for bytes, float32 for float32 values."""
    return FLOAT32_SCALE if scale.dtype == torch.float32 else E8M0


def _allowed_scale_dtypes(sf: ScaleFormat) -> tuple:
    """Storage dtypes accepted for ``sf``: its own, and uint8 for any byte-coded format (same bytes)."""
    want = scale_storage_dtype(sf)
    return (want, torch.uint8) if sf.is_coded else (want,)


@dataclass(frozen=True)
class PackedTensor:
    """Group-quantized data in storage form (see the module docstring for the exact layout).

    Fields:
        data: packed element codes (dtype from :func:`element_storage_dtype`).
        scale: one scale per group in ``scale_format``'s storage (:func:`scale_storage_dtype`;
            ``uint8`` is accepted for any byte-coded format).
        fmt: the element format.
        layout: original shape, grouped dim (non-negative) and block size.
        dtype: the original float dtype, restored by :meth:`dequantize`.
        scale_format: the scale format; None (the default) means E8M0 for byte scales and float32
            for float32 scales, as packed tensors were before scale formats.
        tensor_scale: the 0-d float32 per-tensor second scale (two-level scaling, NVFP4), or None.
    """

    data: torch.Tensor
    scale: torch.Tensor
    fmt: ElementFormat
    layout: GroupLayout
    dtype: torch.dtype
    scale_format: Optional[ScaleFormat] = None
    tensor_scale: Optional[torch.Tensor] = None

    def __post_init__(self) -> None:
        if self.scale_format is None:
            object.__setattr__(self, "scale_format", _default_scale_format(self.scale))
        want = element_storage_dtype(self.fmt)
        shape = _packed_data_shape(self.fmt, self.layout)
        if self.data.dtype != want or tuple(self.data.shape) != shape:
            raise ValueError(f"packed elements of {self.fmt.name} for layout {self.layout} must be {want} of shape "
                             f"{shape}, got {self.data.dtype} of shape {tuple(self.data.shape)}")
        sshape = _packed_scale_shape(self.layout)
        allowed = _allowed_scale_dtypes(self.scale_format)
        if self.scale.dtype not in allowed or tuple(self.scale.shape) != sshape:
            raise ValueError(f"packed scales of scale format {self.scale_format.name} must be "
                             f"{' or '.join(map(str, allowed))} of shape {sshape}, "
                             f"got {self.scale.dtype} of shape {tuple(self.scale.shape)}")
        ts = self.tensor_scale
        if ts is not None and (not isinstance(ts, torch.Tensor) or ts.dtype != torch.float32 or ts.dim() != 0):
            raise ValueError("a packed tensor scale is a 0-d float32 tensor, got "
                             f"{getattr(ts, 'dtype', type(ts).__name__)} of shape {tuple(getattr(ts, 'shape', ()))}")
        if self.dtype not in _DTYPES.values():
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {self.dtype}")

    @property
    def format_name(self) -> str:
        return self.fmt.name

    @property
    def shape(self) -> torch.Size:
        """Shape of the original tensor."""
        return torch.Size(self.layout.shape)

    @property
    def dim(self) -> int:
        return self.layout.dim

    @property
    def block_size(self) -> int:
        return self.layout.block_size

    @property
    def power_of_two_scales(self) -> bool:
        """True when ``scale`` holds exponent codes (E8M0, E{k}M0); False for float-valued scales."""
        return self.scale_format.is_power_of_two

    @property
    def nbytes(self) -> int:
        """Storage in bytes: elements, scales, and the tensor scale (4 bytes) if any."""
        ts = 0 if self.tensor_scale is None else self.tensor_scale.numel() * self.tensor_scale.element_size()
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size() + ts

    def unpack(self) -> GroupQuantized:
        """The :class:`GroupQuantized` this was packed from (codes, scales and E8M0 codes, bit for bit)."""
        fmt, layout = self.fmt, self.layout
        if is_byte_format(fmt):
            codes = self.data.view(code_dtype(fmt))
        else:
            count = int(torch.Size(layout.contracted_shape).numel())
            signed = isinstance(fmt, IntFormat) and fmt.signed
            codes = unpack_bits(self.data, fmt.bit_width, count, signed).to(code_dtype(fmt))
            codes = codes.view(layout.contracted_shape)
        sf = self.scale_format
        if sf.is_coded:
            scale_codes = self.scale.view(torch.uint8).unsqueeze(layout.reduce_dim)
            scale = decode_scale(scale_codes, sf)
        else:
            scale_codes, scale = None, self.scale.float().unsqueeze(layout.reduce_dim)
        return GroupQuantized(codes=codes, scale=scale, scale_codes=scale_codes, fmt=fmt, layout=layout, dtype=self.dtype,
                              scale_format=sf, tensor_scale=self.tensor_scale)

    def dequantize(self) -> torch.Tensor:
        """``element * scale`` in the original shape and dtype (equal to ``fake_quant`` of the input)."""
        return self.unpack().dequantize()

    def to(self, device: Union[str, torch.device]) -> "PackedTensor":
        """A copy on another device."""
        ts = None if self.tensor_scale is None else self.tensor_scale.to(device)
        return PackedTensor(self.data.to(device), self.scale.to(device), self.fmt, self.layout, self.dtype,
                            self.scale_format, ts)

    def to_record(self) -> Dict[str, object]:
        """Tensors and plain values only (loadable with ``torch.load(..., weights_only=True)``).

        ``scale_format`` (a scale format record) is always written; ``tensor_scale`` only when there is one."""
        record = {"data": self.data, "scale": self.scale, "format": format_record(self.fmt),
                  "scale_format": scale_format_record(self.scale_format), "shape": list(self.layout.shape),
                  "dim": self.layout.dim, "block_size": self.layout.block_size, "dtype": str(self.dtype)}
        if self.tensor_scale is not None:
            record["tensor_scale"] = self.tensor_scale
        return record

    @classmethod
    def from_record(cls, record: Dict[str, object]) -> "PackedTensor":
        """Inverse of :meth:`to_record`; ValueError names a missing or inconsistent field. A record
        without ``scale_format`` (written before scale formats) has E8M0 bytes or float32 scales."""
        if not isinstance(record, dict):
            raise TypeError(f"a packed-tensor record is a dict, got {type(record).__name__}")
        missing = [k for k in ("data", "scale", "format", "shape", "dim", "block_size", "dtype") if k not in record]
        if missing:
            raise ValueError(f"packed-tensor record lacks field(s) {missing}")
        if record["dtype"] not in _DTYPES:
            raise ValueError(f"packed-tensor record field 'dtype' must be one of {list(_DTYPES)}, got {record['dtype']!r}")
        fmt = format_from_record(record["format"])  # type: ignore[arg-type]
        layout = GroupLayout.build(torch.Size(record["shape"]), record["dim"], record["block_size"])  # type: ignore[arg-type]
        sf = scale_format_from_record(record["scale_format"]) if "scale_format" in record else None  # type: ignore[arg-type]
        return cls(record["data"], record["scale"], fmt, layout, _DTYPES[record["dtype"]], sf,  # type: ignore[arg-type]
                   record.get("tensor_scale"))  # type: ignore[arg-type]


def _element_data(q: GroupQuantized) -> torch.Tensor:
    """The packed element tensor of ``q``'s codes."""
    fmt = q.fmt
    if is_byte_format(fmt):
        return q.codes.view(element_storage_dtype(fmt))
    return pack_bits(q.codes, fmt.bit_width)


def pack(q: Union[GroupQuantized, object]) -> PackedTensor:
    """Pack ``q`` into its storage form; ``pack(q).unpack()`` equals ``q`` bit for bit.

    ``q`` is a :class:`GroupQuantized` (from ``groupquant.quantize``) or a group-wise quant tensor
    (anything with ``to_group_quantized()``, such as ``GroupwiseIntQuantTensor`` and
    ``GroupwiseFloatQuantTensor``), which is converted first.
    """
    if not isinstance(q, GroupQuantized) and callable(getattr(q, "to_group_quantized", None)):
        q = q.to_group_quantized()  # type: ignore[union-attr]
    if not isinstance(q, GroupQuantized):
        raise TypeError("pack expects a GroupQuantized (from groupquant.quantize) or a group-wise quant tensor, "
                        f"got {type(q).__name__}")
    want = code_dtype(q.fmt)
    if q.codes.dtype != want or tuple(q.codes.shape) != q.layout.contracted_shape:
        raise ValueError(f"codes of {q.fmt.name} must be {want} of shape {q.layout.contracted_shape}, "
                         f"got {q.codes.dtype} of shape {tuple(q.codes.shape)}")
    sf = q.scale_format
    if sf.is_coded and q.scale_codes is None:  # built without a scale format and with float scales
        sf = FLOAT32_SCALE
    store = scale_storage_dtype(sf)
    if sf.is_coded:
        scale = q.scale_codes.squeeze(q.layout.reduce_dim).contiguous().to(torch.uint8).view(store)
    else:  # float32 values; bfloat16 scales are bf16-rounded, so the cast is exact
        scale = q.scale.float().squeeze(q.layout.reduce_dim).contiguous().to(store)
    ts = None if q.tensor_scale is None else q.tensor_scale.detach().float().reshape(()).clone()
    return PackedTensor(_element_data(q).contiguous(), scale, q.fmt, q.layout, q.dtype, sf, ts)
