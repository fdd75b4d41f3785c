"""Regions the functional-quantization mode leaves alone: while a groupquant layer computes (its
own torch calls must not be quantized again) and while a module that quantize_model left float
runs (see :mod:`groupquant.nn.functional.functional_mode`). Regions nest."""
from __future__ import annotations

import contextvars
from typing import Any, Optional

import torch

__all__ = ["in_quant_layer", "inside_quant_layer", "enter_untouched", "leave_untouched"]

_DEPTH: contextvars.ContextVar[int] = contextvars.ContextVar("groupquant_untouched_depth", default=0)


class _TracedDepth:
    """The same depth while ``torch.compile`` traces: dynamo follows an attribute of a plain
    object (it cannot trace a ContextVar); tracing runs one thread at a time."""

    depth = 0


_TRACED = _TracedDepth()


def inside_quant_layer() -> bool:
    """True while a groupquant layer's forward (or a module left float) runs. A region opened while
    compiling counts in eager code too (what a graph break runs eagerly inside it)."""
    if _TRACED.depth > 0:
        return True
    return not torch.compiler.is_compiling() and _DEPTH.get() > 0


def enter_untouched() -> Optional[contextvars.Token]:
    """Open a region the mode leaves alone; give the result to :func:`leave_untouched`."""
    if torch.compiler.is_compiling():
        _TRACED.depth += 1
        return None
    return _DEPTH.set(_DEPTH.get() + 1)


def leave_untouched(token: Optional[contextvars.Token]) -> None:
    """Close the region :func:`enter_untouched` opened (innermost first)."""
    if token is None:
        _TRACED.depth -= 1
    else:
        _DEPTH.reset(token)


class in_quant_layer:  # noqa: N801 (used like a function: ``with in_quant_layer():``)
    """Context manager marking a groupquant layer's computation."""

    def __enter__(self) -> None:
        self._token = enter_untouched()

    def __exit__(self, *exc: Any) -> None:
        leave_untouched(self._token)
