"""WeightGrid: a linear layer's weight quantizer with its group scales fixed (the grid GPTQ and the
scale search round onto), and the layer's own quantizer read as one.

A weight ``W [O, I]`` quantized group-wise along the input dim (blocks of ``group_size`` columns,
one scale per row and block) rounds element ``W[o, i]`` to ``round_to_format(W[o, i] / S[o, b]) *
S[o, b]`` with ``b = i // group_size``. ``S`` is the block scale (E8M0 power of two for MX) times the
per-tensor scale ``g`` for two-level formats (NVFP4: UE4M3 block scale times the FP32 ``g``).

Storing a calibrated result as float weights: the layer re-derives its scales from the stored
weight. For power-of-two floor-rule scales this reproduces the result exactly (values on a grid
``q * 2**k`` requantize to themselves: the rule's scale from the block's amax is the finest one that
holds them). For NVFP4 it does when each block's largest element sits at its rule value, so the
grid ``pins`` one element per row and block (the one of largest ``|W|``) to ``+-max_normal * S``:
the block's amax then gives back the block scale, and the block of the tensor's amax gives back
``g``. :func:`settle` iterates the layer's quantizer to a fixed point to remove float ulps.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Optional

import torch
from torch import nn

from ..formats import ElementFormat, ScaleFormat
from ..nn.layers.quant_layers import is_quant_layer
from ..ops import fake_quant_spec_with_scale, round_to_format
from .grid_rounding import LookupRounder, lookup_rounder

__all__ = ["WeightGrid", "grid_unsupported", "rule_grid", "layer_fake_quant", "settle"]


@dataclass(frozen=True)
class WeightGrid:
    """Fixed rounding grid of a weight ``[O, I]``.

    fmt: element format; group_size: columns per block; scale: float32 ``[O, k]`` step multiplier per
    row and block (block scale times tensor scale); pin: ``[O, k]`` int64 column (inside the block)
    of the element kept at ``+-max_normal * scale`` with the sign ``pin_sign`` (None: no pinning);
    rounding: element rounding mode; scale_format: the block scales' number format; tensor_scale: the
    per-tensor scale ``g`` folded into ``scale`` (1.0 without two-level scaling).
    """

    fmt: ElementFormat
    group_size: int
    scale: torch.Tensor
    rounding: str = "even"
    pin: Optional[torch.Tensor] = None
    pin_sign: Optional[torch.Tensor] = None
    scale_format: Optional[ScaleFormat] = None
    tensor_scale: float = 1.0

    @property
    def in_features(self) -> int:
        return self.scale.shape[1] * self.group_size

    def column_scale(self, col: int) -> torch.Tensor:
        """``S[:, col // group_size]`` (float32 ``[O]``)."""
        return self.scale[:, col // self.group_size]

    def quantize_column(self, w: torch.Tensor, col: int) -> torch.Tensor:
        """Column ``col`` of the weight (``w``: ``[O]``, any float dtype) rounded onto the grid (w's dtype);
        by table look-up where it applies (:mod:`.grid_rounding`, the same values as ``round_to_format``)."""
        s = self.column_scale(col)
        v = (w / s.to(w.dtype)).float()
        rounder = _rounder(self.fmt, self.rounding, v.device)
        q = (rounder(v) if rounder is not None else round_to_format(v, self.fmt, self.rounding)) * s
        if self.pin is not None:
            pinned = self.pin[:, col // self.group_size] == col % self.group_size
            q = torch.where(pinned, self.pin_sign[:, col // self.group_size] * self.fmt.max_normal * s, q)
        return q.to(w.dtype)

    def quantize(self, w: torch.Tensor) -> torch.Tensor:
        """The whole weight ``[O, I]`` rounded onto the grid (float32)."""
        o, i = w.shape
        k, g = self.scale.shape[1], self.group_size
        wp = torch.nn.functional.pad(w.float(), (0, k * g - i)).reshape(o, k, g)
        s = self.scale.unsqueeze(-1)
        q = round_to_format(wp / s, self.fmt, self.rounding) * s
        if self.pin is not None:
            pinned = torch.arange(g, device=w.device).view(1, 1, g) == self.pin.unsqueeze(-1)
            q = torch.where(pinned, (self.pin_sign * self.fmt.max_normal).unsqueeze(-1) * s, q)
        return q.reshape(o, k * g)[:, :i]

    def with_scale(self, scale: torch.Tensor) -> "WeightGrid":
        """The same grid with other step multipliers (pins kept)."""
        return replace(self, scale=scale)


@functools.lru_cache(maxsize=32)
def _rounder(fmt: ElementFormat, rounding: str, device: torch.device) -> Optional[LookupRounder]:
    """The look-up rounder of ``fmt`` on ``device`` (built once), or None (:func:`lookup_rounder`)."""
    return lookup_rounder(fmt, rounding, device)


def grid_unsupported(layer: nn.Module) -> Optional[str]:
    """Why the grid methods cannot calibrate this layer's weight (None when they can)."""
    spec = layer.weight_spec if is_quant_layer(layer) else None
    weight = getattr(layer, "weight", None)
    if spec is None:
        return "the weight is not quantized"
    if weight is None or weight.dim() != 2:
        return "only 2-D (Linear) weights are calibrated"
    if spec.granularity != "group" or not spec.is_dynamic:
        return f"needs group-wise abs-max scales, got {spec.granularity} / {spec.scale_source} {spec.stats_op}"
    if spec.group_dim not in (1, -1):
        return f"needs blocks along the input dim, got group_dim={spec.group_dim}"
    if spec.rounding == "stochastic" or spec.element_precision is not None or not spec.saturating:
        return "needs deterministic, saturating rounding without an element precision"
    return None


@torch.no_grad()
def layer_fake_quant(layer: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """``w`` quantized by ``layer``'s own weight quantizer (what the layer would use if ``w`` were its weight)."""
    return layer.weight_quant.quant_value(w.to(layer.weight.dtype)).detach()


@torch.no_grad()
def rule_grid(layer: nn.Module, w: Optional[torch.Tensor] = None) -> WeightGrid:
    """The grid the layer's quantizer uses on ``w`` (default: its weight), with NVFP4's pins.

    Rounding ``w`` onto it gives the layer's round to nearest (up to float ulps in two-level scaling).
    """
    w = layer.weight.detach() if w is None else w
    spec = layer.weight_spec
    settings = spec.op_settings(2)  # blocks along the input dim (grid_unsupported)
    wf = w.float()
    res = fake_quant_spec_with_scale(wf, settings.group_spec(wf))
    scale = res.scale.reshape(w.shape[0], -1).float()
    g = 1.0
    if res.tensor_scale is not None:
        g = float(res.tensor_scale)
        scale = scale * res.tensor_scale.float()
    size = settings.block_size if settings.block_size is not None else w.shape[1]
    pin = sign = None
    if spec.tensor_scale or not spec.scale_format.is_power_of_two:
        k = scale.shape[1]
        wp = torch.nn.functional.pad(w.float(), (0, k * size - w.shape[1])).reshape(w.shape[0], k, size)
        pin = wp.abs().argmax(dim=-1)
        sign = torch.where(wp.gather(-1, pin.unsqueeze(-1)).squeeze(-1) < 0, -1.0, 1.0)
    return WeightGrid(spec.fmt, size, scale, spec.rounding, pin, sign, spec.scale_format, g)


@torch.no_grad()
def settle(layer: nn.Module, q: torch.Tensor, steps: int = 4) -> torch.Tensor:
    """The fixed point of the layer's quantizer starting at ``q`` (at most ``steps`` passes): a weight
    that the layer, ``state_dict`` round trips, packing and export all quantize to itself."""
    w = q.to(layer.weight.dtype)
    for _ in range(steps):
        nxt = layer_fake_quant(layer, w)
        if torch.equal(nxt, w):
            return w
        w = nxt
    return w
