"""Whether a groupquant layer is computing: its own torch calls must not be quantized again by a
functional-quantization mode (see :mod:`.functional_mode`)."""
from __future__ import annotations

import contextvars
from typing import Any

import torch

__all__ = ["in_quant_layer", "inside_quant_layer"]

_INSIDE_LAYER: contextvars.ContextVar[bool] = contextvars.ContextVar("groupquant_inside_layer", default=False)


def inside_quant_layer() -> bool:
    """True while a groupquant layer's forward runs."""
    return _INSIDE_LAYER.get()


class in_quant_layer:  # noqa: N801 (used like a function: ``with in_quant_layer():``)
    """Context manager marking a groupquant layer's computation."""

    def __enter__(self) -> None:
        # a torch.compile trace has no function mode to guard against (and cannot trace ContextVar)
        self._token = None if torch.compiler.is_compiling() else _INSIDE_LAYER.set(True)

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            _INSIDE_LAYER.reset(self._token)
