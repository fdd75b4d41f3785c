"""The checks of what a packed inference layer takes (shape, grouping, scale bytes, widths).

:class:`~..errors.PackError` names the layer and what does not fit."""
from __future__ import annotations

from ...ops.packed_tables import MAX_CODE_BITS
from ...packing import PackedTensor
from ..errors import PackError

__all__ = ["check_packable"]



def check_packable(packed: PackedTensor, where: str) -> None:
    """PackError unless ``packed`` is a 2-D weight grouped along its input dim with byte-coded scales
    (E8M0, E{k}M0, UE4M3, ...) and codes of at most 8 bits whose blocks fill whole bytes."""
    if len(packed.shape) != 2 or packed.dim != 1:
        raise PackError(f"{where}: a packed linear weight is 2-D [out, in] grouped along dim 1 (in_features); "
                        f"got shape {tuple(packed.shape)} grouped along dim {packed.dim}")
    if not packed.scale_format.is_coded:
        raise PackError(f"{where}: the weight quantizer has float scales stored as {packed.scale_format.name} "
                        "values, not scale bytes; packed inference takes byte-coded scale formats (scale_format "
                        "e8m0 (MX), e{k}m0, ue4m3 (NVFP4), ...)")
    if packed.fmt.bit_width > MAX_CODE_BITS:
        raise PackError(f"{where}: packed inference takes element codes of at most {MAX_CODE_BITS} bits; "
                        f"the weight format {packed.fmt.name} has bit_width={packed.fmt.bit_width}")
    if packed.block_size * packed.fmt.bit_width % 8:
        raise PackError(f"{where}: a block of {packed.block_size} codes of {packed.fmt.bit_width} bits does not "
                        "fill whole bytes (group_size * bit_width must be a multiple of 8)")
