"""The native ops' parameter record: one frozen dataclass, packed into the ops' ``int[] params``.

:class:`KernelParams` is the ONE Python list of what a native op receives besides the tensor;
its field order is the packed order, and ``csrc/group_quant_params.h`` lists the same fields in
the same order (an X-macro that declares, unpacks and names them). The extension reports its
names (op ``groupquant::kernel_param_fields``) and :func:`check_field_names` compares them with
this class when the extension loads. Adding a field: one field here (filled in
:func:`kernel_params`), one line in that header.

Every format value is read off :mod:`groupquant.formats` (the one definition of a format's
constants), so the kernels never derive a format rule themselves. Packing: bool as 0/1, int as
is, float as the bit pattern of its float32 value.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, fields
from typing import Dict, List, Sequence, Tuple

import torch

from ..formats import REFERENCE_RULES, SCALE_RULES, ElementFormat, FloatFormat, IntFormat, SpecialValues
from .element_round import ROUNDING_MODES
from .op_settings import GroupSpec

__all__ = ["KernelParams", "kernel_params", "op_params", "field_names", "field_index", "check_field_names", "pack_field",
           "SPECIAL_CODES"]

#: The kernels' numbering of special-value rules (csrc/group_quant.h, enum Special).
SPECIAL_CODES = {SpecialValues.NONE: 0, SpecialValues.IEEE: 1, SpecialValues.NAN_ONLY: 2, SpecialValues.FNUZ: 3}


@dataclass(frozen=True)
class KernelParams:
    """Everything a native op needs besides ``x``, in packed order (csrc/group_quant_params.h).

    The call: ``dim`` and ``block_size`` (resolved by :class:`GroupLayout`), ``scale_mode`` and
    ``rounding`` as their index in :data:`~groupquant.formats.SCALE_RULES` / :data:`ROUNDING_MODES` (the C++ enums'
    values), ``seed`` (0 .. 2**32-1). The format: float formats fill exponent_bits .. emin,
    ``special`` (:data:`SPECIAL_CODES`) and ``nan_code`` (-1: none); integer formats fill qmin,
    qmax and frac_bits; ``emax`` (the binade the shared scale aligns to), ``max_normal``,
    ``even_bits`` (the mantissa width ``scale_mode='even'`` rounds amax to), ``negative_zero``
    (the format encodes -0) and ``saturating`` (False: overflow gives Inf/NaN) are filled for
    both. ``exp_max`` caps the shared exponent for the input dtype (and the exponent scale format).
    The scale format: ``scale_kind`` (:class:`~groupquant.formats.ScaleKind`), ``scale_bias`` (the
    exponent format's bias, exponents from -bias; a minifloat's bias), ``scale_mantissa_bits``,
    the clamp range ``scale_min`` .. ``scale_max`` of float-valued scales, ``scale_nan_code`` (-1:
    none), ``tensor_scale`` (a per-tensor second scale is passed to the op) and
    ``scale_overflow_nan`` (an exponent scale whose rule exponent exceeds ``scale_bias`` is NaN
    instead of saturating: ``ExponentScale(saturating=False)``), ``scale_flush_subnormal`` (a block
    whose amax is a float32 subnormal is an all-zero block: ``ExponentScale(flush_subnormal_blocks=True)``).
    """

    # the call
    dim: int
    block_size: int
    scale_mode: int
    rounding: int
    seed: int
    # the element format
    is_float: bool
    is_signed: bool
    exponent_bits: int
    mantissa_bits: int
    bias: int
    emin: int
    emax: int
    max_normal: float
    qmin: int
    qmax: int
    frac_bits: int
    special: int
    nan_code: int
    even_bits: int
    negative_zero: bool
    saturating: bool
    exp_max: int
    # the scale format
    scale_kind: int
    scale_bias: int
    scale_mantissa_bits: int
    scale_min: float
    scale_max: float
    scale_nan_code: int
    tensor_scale: bool
    scale_overflow_nan: bool
    scale_flush_subnormal: bool

    def pack(self) -> List[int]:
        """The op argument ``params``: one int per field, in field order."""
        return [pack_field(getattr(self, name)) for name in field_names()]


def pack_field(value: object) -> int:
    """One field of an op record as an int64: bools as 0/1, floats as their float32 bit pattern."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return struct.unpack("<I", struct.pack("<f", value))[0]
    return int(value)  # type: ignore[call-overload]


_FIELD_NAMES: Tuple[str, ...] = tuple(f.name for f in fields(KernelParams))  # once (torch.compile traces pack)


def field_names() -> Tuple[str, ...]:
    """The fields of :class:`KernelParams`, in packed order."""
    return _FIELD_NAMES


def field_index(name: str) -> int:
    """Position of field ``name`` in the packed ``params``."""
    return field_names().index(name)


def check_field_names(extension_names: Sequence[str]) -> None:
    """RuntimeError unless the extension's field list equals :class:`KernelParams`' (same order)."""
    ours = field_names()
    theirs = tuple(extension_names)
    if theirs != ours:
        raise RuntimeError(
            "groupquant: the native extension's parameter record does not match ops/kernel_params.py "
            f"(a stale build?): extension {','.join(theirs)}; Python {','.join(ours)}")


def _format_fields(fmt: ElementFormat, saturating: bool) -> Dict[str, object]:
    """The format part of the record, read off ``fmt``."""
    common = {"emax": fmt.emax, "max_normal": float(fmt.max_normal), "even_bits": fmt.mantissa_bit_width,
              "saturating": bool(saturating)}
    if isinstance(fmt, IntFormat):
        return dict(common, is_float=False, is_signed=fmt.signed, exponent_bits=0, mantissa_bits=0, bias=0, emin=0,
                    qmin=fmt.qmin, qmax=fmt.qmax, frac_bits=int(fmt.frac_bits), special=0, nan_code=-1,
                    negative_zero=fmt.has_negative_zero)
    if isinstance(fmt, FloatFormat):
        sv = SpecialValues(fmt.special_values)
        nan_code = fmt.nan_code
        return dict(common, is_float=True, is_signed=fmt.signed, exponent_bits=fmt.exponent_bit_width,
                    mantissa_bits=fmt.mantissa_bit_width, bias=int(fmt.bias), emin=fmt.emin, qmin=0, qmax=0,
                    frac_bits=0, special=SPECIAL_CODES[sv], nan_code=-1 if nan_code is None else nan_code,
                    negative_zero=fmt.has_negative_zero)
    raise TypeError(f"fmt must be an IntFormat or FloatFormat, got {type(fmt).__name__}")


def kernel_params(spec: GroupSpec, dtype: torch.dtype) -> KernelParams:
    """The record of ``spec`` for input of ``dtype``; the scale fields (and the exponent cap
    ``exp_max``) are the scale format's own (:meth:`~groupquant.formats.ExponentScale.kernel_fields`)."""
    layout = spec.layout
    if spec.scale_rule in REFERENCE_RULES:
        raise ValueError(f"scale_mode={spec.scale_rule!r} has no native kernel: it runs on the PyTorch reference")
    seed = 0 if spec.seed is None else int(spec.seed) & 0xFFFFFFFF
    return KernelParams(dim=layout.dim, block_size=layout.block_size, scale_mode=SCALE_RULES.index(spec.scale_rule),
                        rounding=ROUNDING_MODES.index(spec.rounding), seed=seed,
                        **_format_fields(spec.fmt, spec.saturating),
                        **spec.scale_format.kernel_fields(dtype, spec.fmt, spec.tensor_scale))  # type: ignore[arg-type]


_PACKED: Dict[tuple, List[int]] = {}


def op_params(spec: GroupSpec, dtype: torch.dtype) -> List[int]:
    """The op argument ``params`` for ``spec`` and input of ``dtype`` (packed :func:`kernel_params`).

    Remembered per distinct (format, call settings, dtype) in eager mode, so a layer's call packs
    nothing; the result is shared: do not mutate it."""
    if torch.compiler.is_compiling():
        return kernel_params(spec, dtype).pack()
    mine = spec.__dict__.get("_packed")  # a spec kept by its caller remembers its own
    if mine is not None and mine[0] == dtype:
        return mine[1]
    layout = spec.layout
    key = (spec.fmt, dtype, spec.saturating, layout.dim, layout.block_size, spec.scale_rule, spec.rounding, spec.seed,
           spec.scale_format, spec.tensor_scale)
    packed = _PACKED.get(key)
    if packed is None:
        if len(_PACKED) > 4096:  # stochastic rounding draws a seed per call: keep the table small
            _PACKED.clear()
        packed = _PACKED[key] = kernel_params(spec, dtype).pack()
    object.__setattr__(spec, "_packed", (dtype, packed))
    return packed
