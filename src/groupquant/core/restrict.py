"""Scale restriction: a float scale, or a power of two (E8M0-representable), from a statistic.

``fp``:           ``scale = stat / max_normal`` (float32; a zero statistic gives scale 1).
``power_of_two``: ``2**e`` with ``e`` chosen by the MX scale rule ``mode`` (``floor`` = OCP MX v1.0,
                  ``ceil``, ``even``, ``rceil``; see :mod:`groupquant.ops.shared_scale`), clamped
                  to E8M0's [-127, 127].
Both come from :func:`groupquant.ops.group_scale`, the one definition of shared scales. A NaN or
Inf statistic gives a NaN scale. A learned scale lives in a parameter domain (the scale, or its
base-2 exponent) mapped by :func:`to_learned` / :func:`from_learned`.
"""
from __future__ import annotations

import torch

from ..formats import E8M0, ElementFormat
from ..ops import group_scale
from ..ops.bits import exp2i, floor_log2
from .ste import round_ste

__all__ = ["RESTRICTIONS", "scale_from_stat", "to_learned", "from_learned"]

RESTRICTIONS = ("fp", "power_of_two")


def scale_from_stat(stat: torch.Tensor, fmt: ElementFormat, rule: str = "floor") -> torch.Tensor:
    """The float32 shared scale for statistic ``stat`` (the largest magnitude to represent), by
    the scale rule ``rule`` (``float`` or a power-of-two rule, :func:`groupquant.ops.group_scale`)."""
    scale, _ = group_scale(stat.detach().float(), fmt, rule)
    return scale


def to_learned(scale: torch.Tensor, restrict: str) -> torch.Tensor:
    """The learned parameter's initial value for ``scale``: the scale itself (``fp``) or its
    exact base-2 exponent as float32 (``power_of_two``; ``scale`` must be a power of two)."""
    scale = scale.detach().float()
    if restrict == "fp":
        return scale.clone()
    if restrict == "power_of_two":
        return floor_log2(scale).float()
    raise ValueError(f"restrict must be one of {RESTRICTIONS}, got {restrict!r}")


def from_learned(param: torch.Tensor, restrict: str, min_val: float) -> torch.Tensor:
    """The scale a learned parameter stands for, differentiable in ``param``.

    ``fp``: ``max(|param|, min_val)``. ``power_of_two``: ``2**round(param)`` (ties to even,
    exponent clamped to E8M0's [-127, 127]), exact in the forward pass, with the gradient of
    ``2**param`` at the rounded exponent (straight-through through the rounding).
    """
    if restrict == "fp":
        return param.abs().clamp_min(min_val)
    if restrict == "power_of_two":
        exponent = round_ste(param).clamp(E8M0.min_exponent, E8M0.max_exponent)
        smooth = torch.exp2(exponent)
        exact = exp2i(exponent.detach().to(torch.int32))
        return (exact - smooth).detach() + smooth
    raise ValueError(f"restrict must be one of {RESTRICTIONS}, got {restrict!r}")
