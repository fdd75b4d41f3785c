"""Subnormals kept whatever the thread's flush-denormal mode: the reference runs with it off.

``torch.set_flush_denormal(True)`` (benchmarks set it) makes CPU float arithmetic on this thread
read subnormal inputs as zero and write subnormal results as zero, which would change the
reference's results for subnormal inputs and for blocks whose scale is tiny. :func:`keeping_denormals`
turns it off for the duration of a computation and back on afterwards when it was on; the native
CPU kernel does the same per worker chunk in C++. torch offers no getter for the mode, so it is
probed: a subnormal float32 times one stays non-zero unless flushing is on.
"""
from __future__ import annotations

from typing import Callable, TypeVar

import torch

__all__ = ["flush_denormal_enabled", "keeping_denormals"]

T = TypeVar("T")

_SUBNORMAL = 2.0 ** -140  # a float32 subnormal


def flush_denormal_enabled() -> bool:
    """Whether CPU arithmetic on this thread flushes subnormals (torch.set_flush_denormal(True))."""
    probe = torch.tensor([_SUBNORMAL], dtype=torch.float32) * torch.tensor([1.0], dtype=torch.float32)
    return bool(probe[0] == 0)


def keeping_denormals(fn: Callable[[], T]) -> T:
    """``fn()`` with subnormals kept; restores the flush-denormal mode it found. Under
    torch.compile it just calls ``fn`` (the mode is a runtime global that tracing cannot toggle)."""
    if torch.compiler.is_compiling() or not flush_denormal_enabled():
        return fn()
    torch.set_flush_denormal(False)
    try:
        return fn()
    finally:
        torch.set_flush_denormal(True)
