"""Packed group-quantized tensors: element codes in the format's bits, one E8M0 byte per group.

:func:`pack` turns a :class:`~groupquant.ops.GroupQuantized` (the result of
``groupquant.quantize``) into a :class:`PackedTensor`; :meth:`PackedTensor.unpack` gives the
same ``GroupQuantized`` back, bit for bit. Layout of the two tensors:

- ``data`` (elements). The codes are read in the row-major order of the contracted shape
  ``S[:d] + (k, block_size) + S[d+1:]`` (a zero-padded last group included). 8-bit formats keep
  that shape, one code per byte, typed (see :mod:`.storage_dtypes`); other widths are a 1-D
  ``uint8`` bit stream, least significant bit first (see :mod:`.bitstream`: FP4 puts the first
  element in the low nibble, FP6 puts four elements in three bytes).
- ``scale``. Shape ``S[:d] + (k,) + S[d+1:]`` (one per group; ``[O, k]`` for a weight grouped
  along its last dim). E8M0 bytes ``e + 127`` for a scale ``2**e`` (0xFF = NaN), typed
  ``torch.float8_e8m0fnu`` where torch has it, else ``uint8``; float32 scales for
  ``scale_mode='float'``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Union

import torch

from ..formats import ElementFormat, IntFormat
from ..ops import GroupLayout, GroupQuantized, code_dtype, e8m0_decode
from .bitstream import pack_bits, packed_nbytes, unpack_bits
from .format_record import format_from_record, format_record
from .storage_dtypes import E8M0_DTYPE, element_storage_dtype, is_byte_format

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


@dataclass(frozen=True)
class PackedTensor:
    """Group-quantized data in storage form (see the module docstring for the exact layout).

    Fields:
        data: packed element codes (dtype from :func:`element_storage_dtype`).
        scale: one E8M0 byte per group (``E8M0_DTYPE``), or float32 scales for non power-of-two scaling.
        fmt: the element format.
        layout: original shape, grouped dim (non-negative) and block size.
        dtype: the original float dtype, restored by :meth:`dequantize`.
    """

    data: torch.Tensor
    scale: torch.Tensor
    fmt: ElementFormat
    layout: GroupLayout
    dtype: torch.dtype

    def __post_init__(self) -> None:
        want = element_storage_dtype(self.fmt)
        shape = _packed_data_shape(self.fmt, self.layout)
        if self.data.dtype != want or tuple(self.data.shape) != shape:
            raise ValueError(f"packed elements of {self.fmt.name} for layout {self.layout} must be {want} of shape "
                             f"{shape}, got {self.data.dtype} of shape {tuple(self.data.shape)}")
        sshape = _packed_scale_shape(self.layout)
        if self.scale.dtype not in (E8M0_DTYPE, torch.uint8, torch.float32) or tuple(self.scale.shape) != sshape:
            raise ValueError(f"packed scales must be E8M0 bytes ({E8M0_DTYPE} or uint8) or float32 of shape {sshape}, "
                             f"got {self.scale.dtype} of shape {tuple(self.scale.shape)}")
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
        """True when ``scale`` holds E8M0 bytes (False: float32 scales)."""
        return self.scale.dtype != torch.float32

    @property
    def nbytes(self) -> int:
        """Storage in bytes: elements plus scales."""
        return self.data.numel() * self.data.element_size() + self.scale.numel() * self.scale.element_size()

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
        if self.power_of_two_scales:
            scale_codes = self.scale.view(torch.uint8).unsqueeze(layout.reduce_dim)
            scale = e8m0_decode(scale_codes)
        else:
            scale_codes, scale = None, self.scale.unsqueeze(layout.reduce_dim)
        return GroupQuantized(codes, scale, scale_codes, fmt, layout, self.dtype)

    def dequantize(self) -> torch.Tensor:
        """``element * scale`` in the original shape and dtype (equal to ``fake_quant`` of the input)."""
        return self.unpack().dequantize()

    def to(self, device: Union[str, torch.device]) -> "PackedTensor":
        """A copy on another device."""
        return PackedTensor(self.data.to(device), self.scale.to(device), self.fmt, self.layout, self.dtype)

    def to_record(self) -> Dict[str, object]:
        """Tensors and plain values only (loadable with ``torch.load(..., weights_only=True)``)."""
        return {"data": self.data, "scale": self.scale, "format": format_record(self.fmt),
                "shape": list(self.layout.shape), "dim": self.layout.dim, "block_size": self.layout.block_size,
                "dtype": str(self.dtype)}

    @classmethod
    def from_record(cls, record: Dict[str, object]) -> "PackedTensor":
        """Inverse of :meth:`to_record`; ValueError names a missing or inconsistent field."""
        if not isinstance(record, dict):
            raise TypeError(f"a packed-tensor record is a dict, got {type(record).__name__}")
        missing = [k for k in ("data", "scale", "format", "shape", "dim", "block_size", "dtype") if k not in record]
        if missing:
            raise ValueError(f"packed-tensor record lacks field(s) {missing}")
        if record["dtype"] not in _DTYPES:
            raise ValueError(f"packed-tensor record field 'dtype' must be one of {list(_DTYPES)}, got {record['dtype']!r}")
        fmt = format_from_record(record["format"])  # type: ignore[arg-type]
        layout = GroupLayout.build(torch.Size(record["shape"]), record["dim"], record["block_size"])  # type: ignore[arg-type]
        return cls(record["data"], record["scale"], fmt, layout, _DTYPES[record["dtype"]])  # type: ignore[arg-type]


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
    if q.scale_codes is not None:
        scale = q.scale_codes.squeeze(q.layout.reduce_dim).contiguous().view(E8M0_DTYPE)
    else:
        scale = q.scale.float().squeeze(q.layout.reduce_dim).contiguous()
    return PackedTensor(_element_data(q).contiguous(), scale, q.fmt, q.layout, q.dtype)
