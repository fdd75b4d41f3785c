"""Per-block scale search against the layer's output error (H-weighted), for E8M0 and NVFP4 grids.

Generalises :mod:`groupquant.core.mse_scale` (which minimises the weight's own squared error) to
the layer objective: for each row ``o`` and block ``b`` of a weight, among candidate scales, keep
the one minimising ``e H_bb e^T`` with ``e = W[o, b] - Q[o, b]`` and ``H_bb`` the block's diagonal
block of ``H = mean(x x^T)`` (cross-block terms are left to GPTQ and to the final check). The rule's
scale is a candidate and wins ties, so each block's error never exceeds round to nearest's.

- power-of-two scales (MX, E8M0): the rule's exponent ``e0`` and ``e0 - below .. e0 + above``;
- minifloat block scales (NVFP4, UE4M3): the UE4M3 values ``s_b * f`` for the factors ``f`` in
  ``FACTORS`` (rounded to UE4M3, clamped to its range); the tensor scale ``g`` stays the rule's
  (it must equal ``amax / 2688`` of the stored weight for the result to survive re-quantization),
  so blocks whose scale is UE4M3's largest (they hold the tensor's amax) keep theirs.

The chosen scales are kept by storing the rounded weight: for the floor rule any power-of-two
grid requantizes to itself, for NVFP4 the pinned block maximum gives the block scale back
(:mod:`groupquant.calib.weight_grid`).
"""
from __future__ import annotations

from typing import Sequence

import torch

from ..ops import round_to_format
from .weight_grid import WeightGrid

__all__ = ["FACTORS", "block_errors", "search_grid"]

#: NVFP4 block-scale candidates, as factors of the rule's block scale.
FACTORS = (0.75, 0.8125, 0.875, 0.9375, 1.0625, 1.125, 1.25)


def block_errors(w: torch.Tensor, q: torch.Tensor, h: torch.Tensor, group_size: int) -> torch.Tensor:
    """``e H_bb e^T`` per row and block (float64 ``[O, k]``), ``e = w - q`` restricted to block ``b``."""
    o, i = w.shape
    k = -(-i // group_size)
    pad = k * group_size - i
    e = torch.nn.functional.pad(w.double() - q.double(), (0, pad)).reshape(o, k, group_size)
    hp = torch.nn.functional.pad(h.double(), (0, pad, 0, pad))
    hb = torch.stack([hp[b * group_size:(b + 1) * group_size, b * group_size:(b + 1) * group_size] for b in range(k)])
    return torch.einsum("okg,kgh,okh->ok", e, hb, e)


def _candidates(grid: WeightGrid, below: int, above: int) -> Sequence[torch.Tensor]:
    """Candidate scale tensors ``[O, k]`` (the rule's first)."""
    out = [grid.scale]
    sf = grid.scale_format
    if sf is None or sf.is_power_of_two:
        for d in list(range(1, above + 1)) + list(range(-1, -below - 1, -1)):
            out.append((grid.scale * 2.0 ** d).clamp(2.0 ** -127, 2.0 ** 127))
        return out
    if not sf.is_coded:  # (float32 / bfloat16 scales: nothing to search among)
        raise ValueError(f"scale_search: block scales in {sf.name} are not searched (E8M0 and minifloat only)")
    g = grid.tensor_scale
    block = round_to_format(grid.scale / g, sf.element, "even")
    top = block >= sf.max_value  # blocks holding the tensor's amax keep their scale: it fixes g
    for f in FACTORS:
        s = round_to_format((block * f).clamp(sf.min_value, sf.max_value), sf.element, "even")
        out.append(torch.where(top, grid.scale, s * g))
    return out


@torch.no_grad()
def search_grid(w: torch.Tensor, h: torch.Tensor, grid: WeightGrid, *, below: int = 2, above: int = 1) -> WeightGrid:
    """``grid`` with each row and block's scale replaced by the candidate of least ``e H_bb e^T``
    (module doc; ``below`` / ``above``: binades searched around a power-of-two rule scale)."""
    for name, given in (("below", below), ("above", above)):
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ValueError(f"scale_search {name} must be a non-negative int (binades), got {given!r}")
    for what, t in (("weight", w), ("H (the input second moment)", h)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"scale_search: the {what} holds {int((~torch.isfinite(t)).sum())} non-finite value(s) "
                             "(NaN / Inf); calibrate on finite activations")
    best_s = best_err = None
    for s in _candidates(grid, below, above):
        err = block_errors(w, grid.with_scale(s).quantize(w), h, grid.group_size)
        if best_s is None:
            best_s, best_err = s, err
            continue
        better = err < best_err
        best_s, best_err = torch.where(better, s, best_s), torch.where(better, err, best_err)
    return grid.with_scale(best_s)
