"""Independent oracle for round_to_precision: enumerate the format's value grid (float64) and pick the
nearest grid point by search, ties by the parity of the code; a different algorithm from the library's
exponent-and-scale rounding."""
from __future__ import annotations

import numpy as np


def grid(e: int, m: int) -> np.ndarray:
    """All non-negative finite values of the IEEE-like eEmM format by code, plus 2**(emax+1) (the Inf code)
    as the last entry; the index of a value is its code."""
    bias = 2 ** (e - 1) - 1
    emin = 1 - bias
    codes = np.arange((2 ** e - 1) * 2 ** m + 1, dtype=np.int64)
    exp_field, frac = codes >> m, codes & (2 ** m - 1)
    normal = np.ldexp(1.0 + frac / 2.0 ** m, (exp_field - bias).astype(np.int64))
    sub = np.ldexp(frac.astype(np.float64), emin - m)
    return np.where(exp_field == 0, sub, normal)


def oracle_round(x: np.ndarray, e: int, m: int, subnormals: bool = True, rounding: str = "even",
                 flush: str = "input") -> np.ndarray:
    """x (float32) rounded to eEmM by grid search, as float32; NaN/Inf pass through, overflow -> Inf."""
    g = grid(e, m)
    min_normal = 2.0 ** (2 - 2 ** (e - 1))
    with np.errstate(invalid="ignore"):
        a = np.abs(x.astype(np.float64))
    finite = np.isfinite(a)
    a_f = np.where(finite, a, 0.0)
    if not subnormals and flush == "input":
        a_f = np.where(a_f < min_normal, 0.0, a_f)
    idx = np.clip(np.searchsorted(g, a_f, side="right") - 1, 0, len(g) - 2)
    lo, hi = g[idx], g[idx + 1]
    above = a_f >= g[-1]
    if rounding == "even":
        # ties go to the even code; with no mantissa bits (m = 0) both neighbours have significand 1, and the
        # library's documented rule is the even multiple of the binade's quantum: up, except 0 vs min normal
        tie_up = (idx % 2 == 1) if m else (lo > 0)
        pick_hi = (a_f - lo > hi - a_f) | ((a_f - lo == hi - a_f) & tie_up)
    elif rounding == "nearest":
        pick_hi = a_f - lo >= hi - a_f
    else:
        pick_hi = np.zeros_like(a_f, dtype=bool)
    r = np.where(pick_hi, hi, lo)
    r = np.where(above | (r == g[-1]), np.inf, r)
    if not subnormals and flush == "output":
        r = np.where(r < min_normal, 0.0, r)
    with np.errstate(invalid="ignore"):
        out = np.where(finite, np.copysign(r, x), x.astype(np.float64))
        return out.astype(np.float32)


def edge_cases(e: int, m: int) -> np.ndarray:
    """float32 values at every tie (midpoint of neighbours), one float32 step either side of it,
    every grid value, around max normal / the overflow threshold, around min normal, and specials."""
    g = grid(e, m)
    mids = (g[:-1] + g[1:]) / 2
    with np.errstate(over="ignore"):
        pts = np.concatenate([g, mids]).astype(np.float32)
    pts = pts[np.isfinite(pts)]
    steps = np.concatenate([pts, np.nextafter(pts, np.float32(0)), np.nextafter(pts, np.float32(np.inf))])
    specials = np.array([0.0, np.inf, np.nan, 3.4028235e38, 1e-45, 1.1754944e-38], dtype=np.float32)
    allv = np.concatenate([steps, specials])
    return np.concatenate([allv, -allv])


def random_patterns(n: int, seed: int) -> np.ndarray:
    """n uniformly random float32 bit patterns (every class: normal, subnormal, zero, Inf, NaN)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2 ** 32, size=n, dtype=np.uint64).astype(np.uint32).view(np.float32)
