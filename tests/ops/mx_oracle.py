"""An independent float64 / ml_dtypes oracle of OCP MX group-wise quantization, in numpy.

Nothing here calls groupquant: the format facts are the OCP MX v1.0 table (DESIGN.md, checked
against ml_dtypes in tests/test_formats.py), element rounding is an ml_dtypes cast (after
clamping to +-max normal, because ml_dtypes maps out-of-range values to NaN for e4m3fn) or a
search over an explicit value grid, and scales are exact powers of two from ``math.frexp``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import ml_dtypes
import numpy as np


@dataclass(frozen=True)
class OracleFormat:
    """Spec facts of one element format, plus its value grid (positive half, ascending, float64)."""

    name: str
    emax: int
    max_normal: float
    mantissa_bits: int  # bits after the leading one in the top binade (what scale_mode='even' rounds to)
    grid: np.ndarray  # non-negative representable magnitudes, ascending, float64 (index == code for floats)
    ml_dtype: Optional[type] = None  # ml_dtypes type that rounds like the format (None for int8)
    int_frac_bits: Optional[int] = None  # fixed-point fraction bits for integer formats


def ml_positive_grid(dtype: type) -> np.ndarray:
    """Every finite non-negative value of an ml_dtypes float type, ascending, decoded from its codes."""
    bits = ml_dtypes.finfo(dtype).bits
    codes = np.arange(2 ** bits, dtype=np.uint8)
    vals = codes.view(dtype).astype(np.float64)
    vals = vals[np.isfinite(vals) & (vals >= 0)]
    return np.unique(vals) + 0.0  # + 0.0: unique may keep -0 as the zero


def minifloat_positive_grid(ebits: int, mbits: int, bias: int, max_normal: float) -> np.ndarray:
    """Non-negative values of a minifloat with subnormals, from the textbook formula, up to max_normal."""
    vals = [m * 2.0 ** (1 - bias - mbits) for m in range(2 ** mbits)]
    for field in range(1, 2 ** ebits):
        for m in range(2 ** mbits):
            vals.append((2 ** mbits + m) * 2.0 ** (field - bias - mbits))
    arr = np.array(sorted(set(vals)), dtype=np.float64)
    return arr[arr <= max_normal]


def _float_format(name: str, dtype: type, emax: int, max_normal: float, mbits: int) -> OracleFormat:
    return OracleFormat(name, emax, max_normal, mbits, ml_positive_grid(dtype), dtype)


#: The OCP MX element formats (DESIGN.md table; OCP MX v1.0 section 5).
MX = {
    "fp8_e4m3": _float_format("fp8_e4m3", ml_dtypes.float8_e4m3fn, 8, 448.0, 3),
    "fp8_e5m2": _float_format("fp8_e5m2", ml_dtypes.float8_e5m2, 15, 57344.0, 2),
    "fp6_e3m2": _float_format("fp6_e3m2", ml_dtypes.float6_e3m2fn, 4, 28.0, 2),
    "fp6_e2m3": _float_format("fp6_e2m3", ml_dtypes.float6_e2m3fn, 2, 7.5, 3),
    "fp4_e2m1": _float_format("fp4_e2m1", ml_dtypes.float4_e2m1fn, 2, 6.0, 1),
    "int8": OracleFormat("int8", 0, 127 / 64, 6, np.arange(128, dtype=np.float64) / 64, None, 6),
}

def from_ml_dtype(name: str, dtype: type) -> OracleFormat:
    """Oracle facts of any ml_dtypes minifloat, read from its finfo (emax = maxexp - 1)."""
    fi = ml_dtypes.finfo(dtype)
    return _float_format(name, dtype, int(fi.maxexp) - 1, float(fi.max), int(fi.nmant))


#: ml_dtypes types of the float formats, by groupquant name.
ML_DTYPES = {name: f.ml_dtype for name, f in MX.items() if f.ml_dtype is not None}


def round_grid(v: np.ndarray, grid: np.ndarray, rounding: str, signed: bool = True,
               negative_zero: bool = True) -> np.ndarray:
    """Round float64 ``v`` onto a symmetric value grid given by its non-negative half, saturating.

    even: nearest, ties to the neighbour whose significand is even in units of the spacing between
    the two neighbours (the even code for minifloats with a mantissa; for a zero-mantissa format
    the larger neighbour, as ml_dtypes' float8_e8m0fnu rounds); nearest: ties away from zero;
    floor: toward zero. NaN stays NaN; the sign of a zero result follows ``v`` (as IEEE casts do)
    unless ``negative_zero`` is False. For an unsigned grid negative values give 0.
    """
    v = np.asarray(v, dtype=np.float64)
    a = np.minimum(np.abs(v), grid[-1])
    hi_i = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo_i = np.where(grid[hi_i] == a, hi_i, np.maximum(hi_i - 1, 0))
    lo, hi = grid[lo_i], grid[hi_i]
    d_lo, d_hi = a - lo, hi - a
    if rounding == "even":
        step = np.where(hi > lo, hi - lo, 1.0)
        hi_even = np.round(hi / step) % 2 == 0
        pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & hi_even & (hi_i != lo_i))
    elif rounding == "nearest":
        pick_hi = d_hi <= d_lo
    elif rounding == "floor":
        pick_hi = hi == a
    else:
        raise ValueError(rounding)
    mag = np.where(pick_hi, hi, lo)
    out = np.copysign(mag, v)
    if not negative_zero:
        out = np.where(out == 0, 0.0, out)
    if not signed:
        out = np.where(v < 0, 0.0, out)
    return np.where(np.isnan(v), np.nan, out)


def neighbours(v: np.ndarray, grid: np.ndarray) -> tuple:
    """Grid magnitudes just below-or-at and at-or-above |v| (|v| clamped to the grid's range)."""
    a = np.minimum(np.abs(np.asarray(v, dtype=np.float64)), grid[-1])
    hi_i = np.clip(np.searchsorted(grid, a, side="left"), 0, len(grid) - 1)
    lo_i = np.where(grid[hi_i] == a, hi_i, np.maximum(hi_i - 1, 0))
    return grid[lo_i], grid[hi_i]


def round_elements(v: np.ndarray, fmt: OracleFormat) -> np.ndarray:
    """Round-to-nearest-even of float64 ``v`` onto ``fmt`` with saturation: ml_dtypes cast of clamp(v)."""
    v = np.asarray(v, dtype=np.float64)
    c = np.clip(v, -fmt.max_normal, fmt.max_normal)
    if fmt.ml_dtype is None:
        q = np.round(c * 2.0 ** fmt.int_frac_bits) * 2.0 ** -fmt.int_frac_bits + 0.0  # integers have no -0
    else:
        with np.errstate(invalid="ignore"):  # NaN into a NaN-less type (the NaN is restored below)
            q = c.astype(np.float32).astype(fmt.ml_dtype).astype(np.float64)
    return np.where(np.isnan(v), np.nan, q)


def floor_log2(a: float) -> int:
    """Exact floor(log2(a)) for a finite a > 0."""
    return math.frexp(a)[1] - 1


def shared_exponent(amax: float, fmt: OracleFormat, mode: str, dtype_emax: int = 127) -> Optional[int]:
    """Shared exponent for one block (None for a NaN/Inf block), clamped to [-127, 127] and capped
    at ``dtype_emax - emax`` (the input dtype's largest binade: 127 for float32/bfloat16, 15 for
    float16), so that no finite block can overflow to Inf."""
    if not math.isfinite(amax):
        return None
    if amax == 0.0:
        return -127
    fl = floor_log2(amax)
    if mode == "floor":
        e = fl - fmt.emax
    elif mode == "ceil":
        e = fl if amax == 2.0 ** fl else fl + 1
        e -= fmt.emax
    elif mode == "even":
        steps = round(amax / 2.0 ** fl * 2 ** fmt.mantissa_bits)  # Python round: ties to even, exact here
        e = fl + (1 if steps >= 2 ** (fmt.mantissa_bits + 1) else 0) - fmt.emax
    elif mode == "rceil":
        e = math.ceil(math.log2(amax / fmt.max_normal)) + 1
        while fmt.max_normal * 2.0 ** (e - 1) >= amax:  # smallest e with max_normal * 2**e >= amax, exactly
            e -= 1
    else:
        raise ValueError(mode)
    return max(-127, min(127, dtype_emax - fmt.emax, e))


@dataclass(frozen=True)
class OracleResult:
    """Per-block oracle results for a 2-D ``[blocks, block_size]`` input."""

    exponent: np.ndarray  # int64 shared exponent per block (0 where NaN block)
    nan_block: np.ndarray  # bool per block
    elements: np.ndarray  # float64 element values (NaN in NaN blocks)
    output: np.ndarray  # float64 element * scale (NaN in NaN blocks), before the output-dtype cast


def quantize_blocks(x: np.ndarray, fmt: OracleFormat, mode: str = "floor", dtype_emax: int = 127) -> OracleResult:
    """MX quantization of float64 ``x`` of shape ``[blocks, block_size]`` (each row one block)."""
    with np.errstate(invalid="ignore"):  # signalling-NaN patterns raise the invalid flag when widened
        x = np.asarray(x, dtype=np.float64)
        amax = np.max(np.abs(x), axis=1)
    exps = [shared_exponent(float(a), fmt, mode, dtype_emax) for a in amax]
    nan_block = np.array([e is None for e in exps])
    exponent = np.array([0 if e is None else e for e in exps], dtype=np.int64)
    scale = np.ldexp(1.0, exponent)[:, None]
    elements = round_elements(x / scale, fmt)  # division by a power of two: exact in float64
    elements[nan_block] = np.nan
    output = elements * scale
    return OracleResult(exponent, nan_block, elements, output)


def element_codes(elements: np.ndarray, fmt: OracleFormat) -> np.ndarray:
    """Bit patterns of element values: ml_dtypes bytes for floats, two's complement for int8."""
    if fmt.ml_dtype is None:
        return np.round(elements * 2.0 ** fmt.int_frac_bits).astype(np.int64)
    with np.errstate(invalid="ignore"):
        return elements.astype(np.float32).astype(fmt.ml_dtype).view(np.uint8).astype(np.int64)


def all_bf16() -> np.ndarray:
    """All 65,536 bfloat16 bit patterns, as float32 (exact), in code order."""
    return np.arange(2 ** 16, dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)


def all_fp16() -> np.ndarray:
    """All 65,536 float16 bit patterns, as float32 (exact), in code order."""
    return np.arange(2 ** 16, dtype=np.uint16).view(np.float16).astype(np.float32)
