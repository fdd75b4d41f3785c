"""The packed-GEMM ops' parameter record: one frozen dataclass, packed into ``int[] params``.

:class:`PackedGemmParams` lists the fields in packed order; ``csrc/packed_gemm.h`` lists the same
fields in the same order (an X-macro). The extension reports its names (op
``groupquant::packed_gemm_param_fields``) and :func:`check_packed_field_names` compares them when
the packed ops are first used. Packing: bool as 0/1, int as is, float as its float32 bit pattern.
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import List, Sequence, Tuple

from ..formats import ElementFormat
from .kernel_params import pack_field
from .packed_tables import FastDecode, fast_decode

__all__ = ["PackedGemmParams", "packed_gemm_params", "packed_field_names", "check_packed_field_names",
           "TILE_GEMM_MIN_ROWS"]

#: Input rows from which the CPU kernel decodes weight tiles and runs a float GEMM on each
#: (below: the streaming kernel that FMAs the decoded codes against all rows at once).
TILE_GEMM_MIN_ROWS = 16


@dataclass(frozen=True)
class PackedGemmParams:
    """Everything the packed-GEMM ops take besides tensors (see csrc/packed_gemm.h).

    The weight ``[out_features, in_features]`` is grouped along ``in_features`` in blocks of
    ``block_size`` (``num_blocks`` per row, the last zero-padded), codes of ``code_bits`` bits.
    ``decode_path`` .. ``nan_low7``: the CPU decode (:class:`~.packed_tables.FastDecode`).
    ``has_global_scale`` / ``global_scale``: a per-tensor float32 scale multiplied after the
    block scale (NVFP4's second scale; off for MX). ``tile_gemm_min_rows``: see
    :data:`TILE_GEMM_MIN_ROWS`.
    """

    in_features: int
    out_features: int
    block_size: int
    num_blocks: int
    code_bits: int
    decode_path: int
    elem_mul: float
    half_shift: int
    nan_low7: int
    has_global_scale: bool
    global_scale: float
    tile_gemm_min_rows: int

    def pack(self) -> List[int]:
        """The op argument ``params``: one int per field, in field order."""
        return [pack_field(getattr(self, name)) for name in packed_field_names()]


_NAMES: Tuple[str, ...] = tuple(f.name for f in fields(PackedGemmParams))


def packed_field_names() -> Tuple[str, ...]:
    """The fields of :class:`PackedGemmParams`, in packed order."""
    return _NAMES


def check_packed_field_names(extension_names: Sequence[str]) -> None:
    """RuntimeError unless the extension's packed-GEMM field list equals :class:`PackedGemmParams`'."""
    if tuple(extension_names) != _NAMES:
        raise RuntimeError("groupquant: the native packed-GEMM parameter record does not match "
                           f"ops/packed_gemm_params.py (a stale build?): extension {','.join(extension_names)}; "
                           f"Python {','.join(_NAMES)}")


def packed_gemm_params(fmt: ElementFormat, out_features: int, in_features: int, block_size: int,
                       global_scale: float = 1.0, has_global_scale: bool = False,
                       tile_gemm_min_rows: int = TILE_GEMM_MIN_ROWS) -> PackedGemmParams:
    """The record for a weight ``[out_features, in_features]`` of ``fmt`` codes in blocks of ``block_size``."""
    fast: FastDecode = fast_decode(fmt)
    return PackedGemmParams(in_features=int(in_features), out_features=int(out_features), block_size=int(block_size),
                            num_blocks=-(-int(in_features) // int(block_size)), code_bits=int(fmt.bit_width),
                            decode_path=fast.path, elem_mul=float(fast.elem_mul), half_shift=int(fast.half_shift),
                            nan_low7=int(fast.nan_low7), has_global_scale=bool(has_global_scale),
                            global_scale=float(global_scale), tile_gemm_min_rows=int(tile_gemm_min_rows))
