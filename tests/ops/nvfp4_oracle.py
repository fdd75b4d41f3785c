"""An independent numpy float32 + ml_dtypes oracle of NVFP4 and of block quantization with other
scale formats (E{k}M0, bfloat16, float32, unsigned minifloats).

Nothing here calls groupquant. The arithmetic is transcribed from the description of NVFP4 as
NVIDIA's kernels and torchao compute it, every step a float32 operation (numpy float32 scalars and
arrays round each operation to nearest even and keep subnormals), in this order::

    g = max(amax(|x|) / 2688, 2**-126)           per tensor; NaN if x holds NaN or Inf (two-level)
    s = e4m3(clamp((amax_block / 6) / g, 2**-6, 448))                      block scale, RNE
    q = e2m1(clamp(x * min((1 / g) / s, F32_MAX), -6, 6))                  elements, RNE
    dequantized = (q * s) * g

The multiplier ``(1 / g) / s`` saturates at float32's max, as TransformerEngine's
``fminf(1 / decode_scale, FLT_MAX)`` does: without that it is Inf wherever ``g * s < 2**-128`` (an
all-zero tensor: g = 2**-126, s = 2**-6) and ``0 * Inf`` would make the zeros NaN.

Single-level (no tensor scale): ``s = e4m3(clamp(amax_block / 6, 2**-6, 448))``, ``q = e2m1(x / s)``
(a true division), ``q * s``; a block holding NaN or Inf has a NaN scale (code 0x7F) and NaN
elements. Rounding onto E4M3 / E2M1 is an ``ml_dtypes`` cast after clamping, because ml_dtypes maps
out-of-range values to NaN for float8_e4m3fn and NaN to -0 for float4_e2m1fn; NaN is restored
explicitly. Element codes: the ml_dtypes byte; a NaN element (E2M1 has no NaN) is code 0, the block's
NaN scale marks it.

The generic oracle (:func:`block_quantize`) takes the same steps with other scale formats:

- ``('exp', k)``, E{k}M0: ``e = floor(log2 amax) - emax`` from ``math.frexp`` (exact), clamped to
  ``[-(2**(k-1) - 1), 2**(k-1) - 1]`` and capped at ``dtype_emax - emax`` (127 for float32 / bfloat16
  input, 15 for float16); an all-zero block gets the bottom; code ``e + bias``, NaN code ``2**k - 1``.
  Elements ``x / 2**e`` (exact).
- ``('bf16',)`` / ``('f32',)``: ``s = clamp(amax / max_normal, 0, max)`` rounded to bfloat16 (ml_dtypes
  cast) or kept; 0 becomes 1; elements ``x / s``; no codes.
- ``('mini', e, m)``, the unsigned minifloat ``ue{e}m{m}`` whose all-ones code is NaN: value grid from
  the textbook formula (:func:`minifloat_grid`); ``ue4m3`` equals ml_dtypes' float8_e4m3fn with sign 0
  (checked in the tests), which the NVFP4 path uses. ``float8_e5m2`` is *not* ue5m2 (IEEE Inf/NaN at
  the top exponent: max 57344, not 98304), so ue5m2 uses the grid only.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Tuple

import ml_dtypes
import numpy as np
import torch

F32 = np.float32
MIN_TENSOR_SCALE = F32(2.0 ** -126)  # float32's smallest normal


@dataclass(frozen=True)
class Element:
    """An element format: its largest magnitude, its largest binade, its ml_dtypes type (None for int8)."""

    name: str
    max_normal: float
    emax: int
    ml_dtype: Optional[type] = None
    int_frac_bits: Optional[int] = None


ELEMENTS = {
    "fp4_e2m1": Element("fp4_e2m1", 6.0, 2, ml_dtypes.float4_e2m1fn),
    "fp6_e2m3": Element("fp6_e2m3", 7.5, 2, ml_dtypes.float6_e2m3fn),
    "fp8_e4m3": Element("fp8_e4m3", 448.0, 8, ml_dtypes.float8_e4m3fn),
    "fp8_e5m2": Element("fp8_e5m2", 57344.0, 15, ml_dtypes.float8_e5m2),
    "int8": Element("int8", 127 / 64, 0, None, 6),
}
FP4 = ELEMENTS["fp4_e2m1"]


def round_elements(v: np.ndarray, el: Element) -> np.ndarray:
    """Nearest-even rounding of float32 ``v`` onto the element format, saturating; NaN stays NaN."""
    v = np.asarray(v, dtype=F32)
    with np.errstate(invalid="ignore"):
        c = np.clip(v, F32(-el.max_normal), F32(el.max_normal))
        if el.ml_dtype is None:  # int8: fixed point 1.6, no -0
            q = (np.round(c.astype(np.float64) * 2.0 ** el.int_frac_bits) * 2.0 ** -el.int_frac_bits + 0.0).astype(F32)
        else:
            q = c.astype(el.ml_dtype).astype(F32)
    return np.where(np.isnan(v), F32(np.nan), q)


def element_codes(q: np.ndarray, el: Element) -> np.ndarray:
    """Codes of element values: the ml_dtypes byte (NaN -> 0 for formats without NaN), int8 two's complement."""
    nan = np.isnan(q)
    if el.ml_dtype is None:
        return np.where(nan, 0, np.round(np.nan_to_num(q).astype(np.float64) * 2 ** el.int_frac_bits)).astype(np.int64)
    with np.errstate(invalid="ignore"):
        codes = q.astype(el.ml_dtype).view(np.uint8).astype(np.int64)
    if el.name in ("fp4_e2m1", "fp6_e2m3"):
        codes = np.where(nan, 0, codes)  # no NaN code
    return codes


# ---- scale formats ----------------------------------------------------------------------------

def minifloat_grid(ebits: int, mbits: int) -> np.ndarray:
    """Values of every non-NaN code of the unsigned minifloat ue{e}m{m} (all-ones code NaN), in code order
    (ascending; index == code), float64, from the textbook formula with bias 2**(e-1) - 1."""
    bias = 2 ** (ebits - 1) - 1
    vals = []
    for code in range(2 ** (ebits + mbits) - 1):
        field_e, field_m = code >> mbits, code & (2 ** mbits - 1)
        if field_e == 0:
            vals.append(field_m * 2.0 ** (1 - bias - mbits))
        else:
            vals.append((2 ** mbits + field_m) * 2.0 ** (field_e - bias - mbits))
    return np.array(vals, dtype=np.float64)


@dataclass(frozen=True)
class MiniScale:
    """An unsigned NaN-only minifloat scale format (clamped to its normal range, nearest-even)."""

    ebits: int
    mbits: int

    @property
    def grid(self) -> np.ndarray:
        return minifloat_grid(self.ebits, self.mbits)

    @property
    def min_normal(self) -> float:
        return 2.0 ** (2 - 2 ** (self.ebits - 1))

    @property
    def max_normal(self) -> float:
        return float(self.grid[-1])

    @property
    def nan_code(self) -> int:
        return 2 ** (self.ebits + self.mbits) - 1

    def round(self, s: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """(values float32, codes) of clamped float32 scales ``s`` (finite, in [min_normal, max_normal]):
        nearest, ties to the even code (exact: the grid values are float32 and so are the midpoints)."""
        grid = self.grid
        s64 = np.asarray(s, dtype=np.float64)
        hi = np.clip(np.searchsorted(grid, s64, side="left"), 0, len(grid) - 1)
        lo = np.where(grid[hi] == s64, hi, hi - 1)
        d_lo, d_hi = s64 - grid[lo], grid[hi] - s64
        code = np.where((d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0)), hi, lo)
        return grid[code].astype(F32), code.astype(np.int64)


UE4M3 = MiniScale(4, 3)


def ue4m3_round(s: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """UE4M3 rounding by ml_dtypes: clamp to [2**-6, 448] first (float8_e4m3fn has no Inf), then cast."""
    c = np.clip(np.asarray(s, dtype=F32), F32(2.0 ** -6), F32(448.0))
    e4 = c.astype(ml_dtypes.float8_e4m3fn)
    return e4.astype(F32), e4.view(np.uint8).astype(np.int64)


# ---- layout -----------------------------------------------------------------------------------

def to_blocks(x: np.ndarray, dim: int, block: int) -> np.ndarray:
    """``x`` with ``dim`` moved last, zero-padded to whole blocks, as ``(..., k, block)`` float32."""
    xm = np.moveaxis(np.asarray(x).astype(F32), dim, -1)
    n = xm.shape[-1]
    k = -(-n // block)
    pad = np.zeros(xm.shape[:-1] + (k * block - n,), dtype=F32)
    return np.concatenate([xm, pad], axis=-1).reshape(xm.shape[:-1] + (k, block))


def contracted(blocks: np.ndarray, dim: int, ndim: int) -> np.ndarray:
    """``(..., k, block)`` blocks in groupquant's contracted layout ``S[:d] + (k, block) + S[d+1:]``."""
    d = dim % ndim
    return np.moveaxis(blocks, [-2, -1], [d, d + 1])


def from_blocks(blocks: np.ndarray, dim: int, shape: tuple) -> np.ndarray:
    """Inverse of :func:`to_blocks`: drop the padding and move the dim back."""
    d = dim % len(shape)
    flat = blocks.reshape(blocks.shape[:-2] + (-1,))[..., :shape[d]]
    return np.moveaxis(flat, -1, d)


@dataclass(frozen=True)
class OracleResult:
    """Oracle results; ``scaled`` (float32 values before element rounding), ``elements`` / ``codes`` in
    the contracted layout, ``scale`` / ``scale_codes`` in
    the contracted scale shape (``(k, 1)`` at the dim), ``output`` in x's shape and dtype."""

    output: np.ndarray
    scaled: np.ndarray
    elements: np.ndarray
    codes: np.ndarray
    scale: np.ndarray
    scale_codes: Optional[np.ndarray]
    tensor_scale: Optional[np.float32]


def _tensor_scale(xf: np.ndarray, divisor: float) -> np.float32:
    if xf.size == 0:
        return F32(1.0)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(xf))
    if not np.isfinite(amax):
        return F32(np.nan)
    return max(F32(amax) / F32(divisor), MIN_TENSOR_SCALE)


def block_quantize(x: np.ndarray, scale_format: tuple, el: Element = FP4, block: int = 16, dim: int = -1,
                   tensor_scale: bool = False) -> OracleResult:
    """Block quantization of ``x`` (numpy float32 / float16 / ml_dtypes.bfloat16, any shape) along ``dim``.

    ``scale_format``: ``('ue4m3',)`` (ml_dtypes), ``('mini', e, m)`` (grid), ``('exp', k)``, ``('bf16',)``,
    ``('f32',)``. ``tensor_scale`` (minifloat scales only): the two-level rule of the module doc.
    """
    x = np.asarray(x)
    xf = x.astype(F32)
    block = max(1, min(block, x.shape[dim]))  # a dim shorter than the block is one block (groupquant's layout)
    blocks = to_blocks(xf, dim, block)
    with np.errstate(invalid="ignore"):
        amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    finite = np.isfinite(amax)
    amax0 = np.where(finite, amax, F32(0))
    kind = scale_format[0]
    minifloat = kind in ("ue4m3", "mini")
    mini = UE4M3 if kind == "ue4m3" else (MiniScale(*scale_format[1:]) if kind == "mini" else None)
    g = None
    if tensor_scale:
        assert minifloat
        g = _tensor_scale(xf, mini.max_normal * el.max_normal)
        if np.isnan(g):
            finite = np.zeros_like(finite)
            amax0 = np.zeros_like(amax0)
    codes_s = None
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        if kind == "exp":
            k = scale_format[1]
            bias = 2 ** (k - 1) - 1
            dtype_emax = 15 if x.dtype == np.float16 else 127
            top = min(bias, dtype_emax - el.emax)
            e = np.array([(-bias if a == 0 else math.frexp(float(a))[1] - 1 - el.emax) for a in amax0.ravel()],
                         dtype=np.int64).reshape(amax0.shape)
            e = np.clip(e, -bias, top)
            scale = np.ldexp(F32(1.0), e.astype(np.int32)).astype(F32)
            codes_s = np.where(finite, e + bias, 2 ** k - 1)
            v = blocks / scale
        else:
            raw = amax0 / F32(el.max_normal)
            if g is not None:
                raw = raw / (g if np.isfinite(g) else F32(1.0))
            if kind == "ue4m3":
                scale, codes_s = ue4m3_round(raw)
            elif kind == "mini":
                scale, codes_s = mini.round(np.clip(raw, F32(mini.min_normal), F32(mini.max_normal)))
            else:
                top = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) if kind == "bf16" else float(np.finfo(F32).max)
                scale = np.clip(raw, F32(0), F32(top))
                if kind == "bf16":
                    scale = scale.astype(ml_dtypes.bfloat16).astype(F32)
                scale = np.where(scale > 0, scale, F32(1.0)).astype(F32)
            if codes_s is not None:
                codes_s = np.where(finite, codes_s, mini.nan_code)
            if g is None:
                v = blocks / scale
            else:
                v = blocks * np.minimum((F32(1.0) / g) / scale, np.finfo(F32).max)
        scale = np.where(finite, scale, F32(np.nan)).astype(F32)
        q = round_elements(v, el)
        q = np.where(finite, q, F32(np.nan)).astype(F32)
        out = q * scale
        if g is not None:
            out = out * g
        out = from_blocks(out.astype(F32), dim, x.shape).astype(x.dtype)
    ndim = x.ndim
    return OracleResult(output=out, scaled=contracted(v, dim, ndim), elements=contracted(q, dim, ndim),
                        codes=contracted(element_codes(q, el), dim, ndim),
                        scale=contracted(scale, dim, ndim),
                        scale_codes=None if codes_s is None else contracted(codes_s, dim, ndim),
                        tensor_scale=g)


def nvfp4(x: np.ndarray, dim: int = -1, two_level: bool = True) -> OracleResult:
    """NVFP4 of ``x`` along ``dim``: E2M1 elements, UE4M3 scales (ml_dtypes float8_e4m3fn) per 16,
    the per-tensor float32 scale when ``two_level``."""
    return block_quantize(x, ("ue4m3",), FP4, 16, dim, two_level)


# ---- test data and comparison (torch only, no groupquant) -------------------------------------

E2M1_POS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
E2M1_MID = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]


def adversarial(shape, seed: int) -> np.ndarray:
    """float32 values over many binades, with exact E2M1 midpoints (times powers of two), -0, zero runs,
    float32 subnormals and values just below powers of two mixed in."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    x = rng.standard_normal(n) * np.exp2(rng.integers(-30, 30, n))
    pick = rng.integers(0, 8, n)
    x = np.where(pick == 0, rng.choice(E2M1_MID + E2M1_POS, n) * np.exp2(rng.integers(-8, 8, n)), x)
    x = np.where(pick == 1, -0.0, x)
    x = np.where(pick == 2, rng.uniform(-1, 1, n) * 2.0 ** -130, x)
    x = np.where(pick == 3, np.nextafter(np.exp2(rng.integers(-5, 5, n)).astype(np.float32), np.float32(0)), x)
    return x.astype(np.float32).reshape(shape)


def bits(a: np.ndarray) -> np.ndarray:
    """Unsigned bit patterns of a float array (float32 / float16 / bfloat16)."""
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 2: np.uint16}[a.dtype.itemsize])


def assert_bits(got: torch.Tensor, want: np.ndarray, what: str) -> None:
    """Same NaN positions and, elsewhere, the same bits (-0 included) as the oracle's array."""
    g = got.detach().cpu().contiguous()
    if g.dtype == torch.bfloat16:
        gn = g.view(torch.int16).numpy().view(np.uint16)
        want_nan = np.isnan(want.astype(np.float32))
        got_nan = torch.isnan(g).numpy()
    else:
        gn = bits(g.numpy())
        want_nan, got_nan = np.isnan(want), np.isnan(g.numpy())
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {want.shape}"
    where = np.argwhere(got_nan != want_nan)[:4].tolist()
    assert np.array_equal(got_nan, want_nan), f"{what}: NaN positions differ at {where}"
    bad = np.argwhere((gn != bits(want)) & ~want_nan)
    got_v, want_v = [float(got[tuple(i)]) for i in bad[:4]], [float(want[tuple(i)]) for i in bad[:4]]
    assert bad.size == 0, f"{what}: {len(bad)} differ, first at {bad[:4].tolist()}: got {got_v}, want {want_v}"


def to_torch(x: np.ndarray) -> torch.Tensor:
    """A numpy float32 / float16 / ml_dtypes.bfloat16 array as a torch tensor of the same dtype and bits."""
    if x.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(x).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(np.ascontiguousarray(x))
