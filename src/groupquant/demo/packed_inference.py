"""The demo's packed-inference rows: each PTQ model run from packed weights (``groupquant.pack_model``).

For one format: the packed model's state bytes (element codes at their bits, E8M0 scale bytes,
float32 biases), its test accuracy and loss (the fake-quant model's, up to float32 summation
order), and the best latency (ms) of one forward over the whole test set for the packed model,
the fake-quant model and the float model.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..export import pack_model
from .training import Evaluation, evaluate

__all__ = ["PackedResult", "measure_packed"]


@dataclass(frozen=True)
class PackedResult:
    """One format's packed model: bytes, test result and latencies (milliseconds, best of repeats)."""

    fmt: str
    state_bytes: int
    test: Evaluation
    packed_ms: float
    fake_quant_ms: float
    float_ms: float


def _best_ms(fn: Callable[[], object], repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _state_bytes(model: nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def measure_packed(float_model: nn.Module, qmodel: nn.Module, fmt: str, x: torch.Tensor, y: torch.Tensor,
                   repeats: int = 20) -> PackedResult:
    """Pack a copy of ``qmodel`` (its quantized linear layers) and measure it beside ``qmodel`` and
    ``float_model`` on ``(x, y)``."""
    packed = pack_model(copy.deepcopy(qmodel)).eval()
    qmodel.eval()
    float_model.eval()
    with torch.no_grad():
        return PackedResult(fmt=fmt, state_bytes=_state_bytes(packed), test=evaluate(packed, x, y),
                            packed_ms=_best_ms(lambda: packed(x), repeats),
                            fake_quant_ms=_best_ms(lambda: qmodel(x), repeats),
                            float_ms=_best_ms(lambda: float_model(x), repeats))
