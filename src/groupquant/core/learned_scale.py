"""A learned scale: an ``nn.Parameter`` initialised from statistics on the first call.

The parameter has the granularity's scale shape (``()``, keepdim per channel, or the contracted
``[O, k, 1]`` per group: never the expanded ``[O, I]``). It holds the scale itself (``fp``) or
its base-2 exponent (``power_of_two``, rounded to an integer exponent in the forward pass with a
straight-through gradient, so the scale stays E8M0-representable). Built without a shape
(a quantizer used on its own), the parameter is created on the first call: create optimizers
after that call. The first forward call
(training or not) sets it from the statistic of the tensor it sees and marks the
``initialized`` buffer, so weights copied in after construction (``quantize_model``) are what
it starts from; both are saved in the state dict.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
from torch import nn

from ..formats import ElementFormat
from .granularity import ScaleGranularity
from .restrict import from_learned, scale_from_stat, scale_mode, to_learned
from .stats import ScalingStats

__all__ = ["LearnedScale"]


class LearnedScale(nn.Module):
    """``forward(x)`` -> float32 scale (differentiable in :attr:`value`).

    Args:
        stats, fmt, granularity, restrict, mode: as :class:`StatsScale`, for the initial value.
        shape: the scale shape (``granularity.scale_shape(tensor_shape)``), or None to take it
            from the first tensor seen.
        min_val: smallest ``fp`` scale (keeps it positive).
    """

    def __init__(self, stats: ScalingStats, fmt: ElementFormat, granularity: ScaleGranularity,
                 shape: Optional[Sequence[int]], restrict: str = "fp", mode: str = "floor", min_val: float = 2.0 ** -32) -> None:
        super().__init__()
        scale_mode(restrict, mode)  # validates
        if not isinstance(min_val, (int, float)) or isinstance(min_val, bool) or not min_val > 0:
            raise ValueError(f"min_val must be a positive number, got {min_val!r}")
        self.stats, self.fmt, self.granularity = stats, fmt, granularity
        self.restrict, self.mode, self.min_val = restrict, mode, float(min_val)
        self.value = nn.Parameter(self._placeholder(shape if shape is not None else ()))
        self.shape_known = shape is not None
        self.register_buffer("initialized", torch.zeros((), dtype=torch.bool))
        self._ready = False  # Python mirror of `initialized`: no device sync per call

    def _placeholder(self, shape: Sequence[int]) -> torch.Tensor:
        """The value before initialisation: scale 1."""
        return torch.zeros(tuple(shape)) if self.restrict == "power_of_two" else torch.ones(tuple(shape))

    def extra_repr(self) -> str:
        return f"shape={tuple(self.value.shape)}, restrict={self.restrict}, mode={self.mode}"

    @torch.no_grad()
    def init_from(self, x: torch.Tensor) -> None:
        """Set the parameter from the statistic of ``x`` and mark it initialised."""
        scale = scale_from_stat(self.stats(x, self.granularity), self.fmt, self.restrict, self.mode)
        if not self.shape_known:
            self.value = nn.Parameter(self._placeholder(scale.shape).to(self.value.device))
            self.shape_known = True
        if tuple(scale.shape) != tuple(self.value.shape):
            raise ValueError(f"a tensor of shape {tuple(x.shape)} has scale shape {tuple(scale.shape)}, "
                             f"but this learned scale was built for {tuple(self.value.shape)}")
        self.value.copy_(to_learned(scale, self.restrict).to(self.value))
        self.initialized.fill_(True)
        self._ready = True

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):  # type: ignore[override]
        """A scale whose shape was not known yet takes the saved shape."""
        saved = state_dict.get(prefix + "value")
        if not self.shape_known and saved is not None:
            self.value = nn.Parameter(self._placeholder(saved.shape).to(self.value.device))
            self.shape_known = True
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._ready = bool(self.initialized)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._ready:
            self.init_from(x)
        expected = self.granularity.scale_shape(x.shape)
        if tuple(expected) != tuple(self.value.shape):
            raise ValueError(f"a tensor of shape {tuple(x.shape)} has scale shape {tuple(expected)}, "
                             f"but this learned scale was built for {tuple(self.value.shape)}")
        return from_learned(self.value, self.restrict, self.min_val)
