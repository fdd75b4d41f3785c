"""Independent numpy oracle for the element-wise ops: the documented decompositions written with numpy,
ml_dtypes casts after each basic operation (float32 -> bfloat16 -> float32), transcendental functions
from numpy / scipy in float64 then float32, sums in float64."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
from scipy import special

F32 = np.float32


def q(x) -> np.ndarray:
    """Round to bfloat16 through ml_dtypes (nearest-even, overflow to Inf, subnormals kept)."""
    with np.errstate(all="ignore"):
        return np.asarray(x, dtype=F32).astype(ml_dtypes.bfloat16).astype(F32)


def c(v: float) -> F32:
    """A constant rounded to bfloat16."""
    return q(F32(v))[()]


def _e(fn, x) -> np.ndarray:
    with np.errstate(all="ignore"):
        return q(fn(np.asarray(x, dtype=np.float64)).astype(F32))


def add(a, b): return _ar(lambda: F32(a) + F32(b) if np.isscalar(a) and np.isscalar(b) else np.add(a, b, dtype=F32))
def sub(a, b): return _ar(lambda: np.subtract(a, b, dtype=F32))
def mul(a, b): return _ar(lambda: np.multiply(a, b, dtype=F32))
def div(a, b): return _ar(lambda: np.divide(a, b, dtype=F32))
def recip(x): return div(F32(1.0), x)
def sqrt(x): return _ar(lambda: np.sqrt(np.asarray(x, dtype=F32)))
def exp(x): return _e(np.exp, x)
def exp2(x): return _e(np.exp2, x)
def log(x): return _e(np.log, x)
def tanh(x): return _e(np.tanh, x)
def erf(x): return _e(special.erf, x)
def rsqrt(x): return _e(lambda v: 1.0 / np.sqrt(v), x)
def pow(x, p): return _e(lambda v: np.power(v, p), x)


def _ar(fn):
    with np.errstate(all="ignore"):
        return q(fn())


def sum(x, axis, keepdims=True):
    return q(np.sum(np.asarray(x, dtype=np.float64), axis=axis, keepdims=keepdims).astype(F32))


def mean(x, axis, keepdims=True):
    n = np.prod([np.shape(x)[a] for a in (axis if isinstance(axis, tuple) else (axis,))])
    return div(sum(x, axis, keepdims), F32(n))


LOG2E, LN2 = math.log2(math.e), math.log(2.0)
