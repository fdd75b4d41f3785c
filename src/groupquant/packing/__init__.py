"""Storage form of group-quantized tensors: packed element bits and scale bytes (E8M0, UE4M3, ...).

``pack(groupquant.quantize(x, "fp4_e2m1"))`` gives a :class:`PackedTensor` of 4.25 bits per
element (two FP4 codes per byte, low nibble first, plus one E8M0 byte per 32 elements);
``.unpack()`` returns the codes and scales bit for bit, ``.dequantize()`` the fake-quant values.
``pack(groupquant.quantize(x, "nvfp4"))`` stores two FP4 codes per byte, one UE4M3 byte
(``float8_e4m3fn``) per 16 elements and the float32 tensor scale: 4.5 bits per element.

Elements per scale are ``block_size`` here (``PackedTensor.block_size``, the record's
``"block_size"``: the layout's name; a quantizer's setting for the same number is ``group_size``,
docs/architecture.md, "Names").
"""
from ..ops.bitstream import pack_bits, packed_nbytes, unpack_bits
from .format_record import format_from_record, format_record, scale_format_from_record, scale_format_record
from .packed_tensor import PackedTensor, pack
from .storage_dtypes import E8M0_DTYPE, element_storage_dtype, is_byte_format, scale_storage_dtype

__all__ = [
    "pack_bits", "packed_nbytes", "unpack_bits", "format_from_record", "format_record", "scale_format_from_record",
    "scale_format_record", "PackedTensor", "pack", "E8M0_DTYPE", "element_storage_dtype", "is_byte_format",
    "scale_storage_dtype",
]
