"""two_level_search: NVFP4's block scales and its per-tensor scale chosen together against the
layer's Hessian-weighted error, with the "4 over 6" choice of the block maximum and pins placed
where they cost least.

NVFP4 rounds ``W[o, i]`` onto ``E2M1 * s[o, b] * g``: ``s`` a UE4M3 block scale per 16 inputs, ``g``
a float32 tensor scale. The layer's rule is ``g = amax(W) / 2688`` and ``s = ue4m3((amax_b / 6) / g)``.
The layer keeps no scale state: it re-derives ``g`` and ``s`` from the stored weight. A stored
block gives back the chosen ``s`` exactly when one of its elements sits at ``+-6 * s * g`` (the
*pin*; a block at UE4M3's smallest scale needs none: any smaller amax clamps to it), and the
stored tensor gives back the chosen ``g`` when one block has ``s = 448`` and a pin (then ``amax =
2688 g``; no element exceeds it since ``s <= 448``). The search chooses, under these constraints:

- the tensor scale ``g = c * g_rule`` for ``c`` in ``tensor_factors`` (``1`` always among them);
- per row and block, the block scale among the rule's ``r = ue4m3((amax_b / 6) / g)``, the
  scale search's ``ue4m3(r * f)`` for ``f`` in :data:`groupquant.calib.scale_search.FACTORS` and,
  with ``four_over_six``, ``ue4m3((amax_b / 4) / g)`` (Four Over Six: the block maximum mapped to
  E2M1's 4 instead of 6, where the grid 4, 6 is coarse). A tensor factor of 1.5 (``g = amax /
  (448 * 4)``) is the headroom that lets the tensor's largest block take that choice too;
- per block and candidate, which element is pinned (toward its own sign, + for a zero): with
  ``pins='largest'`` (the default) the block's largest, as the rule's grid; with ``'cheapest'``
  the one whose move to ``+-6 s g`` adds least to ``e H_bb e^T``, in closed form
  ``e'He' = eHe + 2 d (He)_j + d^2 H_jj`` for ``d = q_j - p`` (a pin then lands on an input
  channel that carries little energy, which is what makes the 4-over-6 grid storable);
- which block is the tensor's top (``s = 448`` and a pin), the one whose forcing costs least.

Measured on SmolLM2-135M layers (docs/calibration.md): the search lowers this objective and the
output error of the grid alone, but GPTQ sweeps better on the scale search's grid (cheapest pins
and larger tensor scales coarsen it where GPTQ would have compensated), so ``'largest'`` is the
default and the method is not a default of any recipe.

Objective: ``sum_{o, b} e H_bb e^T`` (``H_bb`` the block-diagonal part of ``H = mean(x x^T)``, as
:mod:`groupquant.calib.scale_search`); ``g``'s factor with the least total wins (ties: the first,
``c = 1``). With ``c = 1`` the scale search's grid is one of the candidates, so the objective is
never above it (nor above round to nearest). GPTQ then sweeps on the chosen grid.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

from ..ops import round_to_format
from ..ops.shared_scale import MIN_TENSOR_SCALE
from .scale_search import FACTORS, block_errors, search_grid
from .weight_grid import WeightGrid

__all__ = ["TENSOR_FACTORS", "FOUR_OVER_SIX", "PINS", "SearchResult", "two_level_grid", "two_level_layer_grid"]

#: Tensor-scale candidates, as factors of the rule's ``g`` (1.0 first: it wins ties).
TENSOR_FACTORS = (1.0, 1.0625, 1.125, 1.25)
#: The "4 over 6" factor: the block maximum mapped to 4 instead of 6.
FOUR_OVER_SIX = 1.5
#: Where the pins may go (the ``pins`` option).
PINS = ("largest", "cheapest")


@dataclass(frozen=True)
class SearchResult:
    """The chosen grid and what was chosen.

    grid: the WeightGrid (step multipliers ``s * g``, pins; ``pin == -1``: no pin); tensor_factor:
    ``g / g_rule``; objective: ``sum e H_bb e^T`` of the grid (float64, block-diagonal H);
    four_over_six: the fraction of blocks whose scale is the 4-over-6 candidate (and no other);
    block_scale: the chosen block scales (float32 ``[O, k]``, values of the block-scale format).
    """

    grid: WeightGrid
    tensor_factor: float
    objective: float
    four_over_six: float
    block_scale: torch.Tensor


@dataclass(frozen=True)
class _Problem:
    """The weight as blocks: ``w`` float32 ``[O, k, G]`` (zero-padded); ``hb`` float64 ``[k, G, G]``
    (H's diagonal blocks), ``hb32`` its float32 copy (the search's arithmetic) and ``hdiag`` their
    diagonals ``[k, G]``; ``sign`` float32 ``[O, k, G]`` (each element's pin sign: its own, + for 0);
    ``barrier``: +inf cost where no pin may go (padding; with ``pins='largest'`` all but each block's
    largest element), 0 elsewhere; ``amax`` float32 ``[O, k]``."""

    w: torch.Tensor
    hb: torch.Tensor
    hb32: torch.Tensor
    hdiag: torch.Tensor
    sign: torch.Tensor
    barrier: torch.Tensor
    amax: torch.Tensor
    template: WeightGrid


@dataclass(frozen=True)
class _Choice:
    """Per row and block: error (float32), block scale in the scale format's units, pinned column
    (-1: none) and its sign."""

    err: torch.Tensor
    block: torch.Tensor
    pin: torch.Tensor
    sign: torch.Tensor

    def where(self, better: torch.Tensor, other: "_Choice") -> "_Choice":
        """Per block, ``other`` where ``better`` else self."""
        return _Choice(*(torch.where(better, b, a) for a, b in
                         ((self.err, other.err), (self.block, other.block), (self.pin, other.pin),
                          (self.sign, other.sign))))


def _problem(w: torch.Tensor, h: torch.Tensor, grid: WeightGrid, pins: str) -> _Problem:
    o, i = w.shape
    size = grid.group_size
    k = -(-i // size)
    pad = k * size - i
    wp = nn.functional.pad(w.float(), (0, pad)).reshape(o, k, size)
    hp = nn.functional.pad(h.double(), (0, pad, 0, pad))
    hb = torch.stack([hp[b * size:(b + 1) * size, b * size:(b + 1) * size] for b in range(k)])
    real = (torch.arange(k * size, device=w.device) < i).reshape(k, size)
    barrier = torch.where(real, 0.0, math.inf).float()
    if pins == "largest":  # only each block's largest element may be pinned (as the rule's grid)
        largest = torch.arange(size, device=w.device) == wp.abs().argmax(-1, keepdim=True)
        barrier = torch.where(largest, barrier, math.inf)
    sign = torch.where(wp < 0, -1.0, 1.0).float()
    hb32 = hb.float()
    return _Problem(wp, hb, hb32, torch.diagonal(hb32, dim1=-2, dim2=-1), sign, barrier, wp.abs().amax(-1), grid)


def _to_scale(x: torch.Tensor, grid: WeightGrid) -> torch.Tensor:
    """``x`` clamped to the block-scale format's normal range and rounded onto it (float32)."""
    sf = grid.scale_format
    return round_to_format(x.float().clamp(sf.min_value, sf.max_value), sf.element, "even")


def _evaluate(p: _Problem, block: torch.Tensor, g: float) -> _Choice:
    """Error of each block on block scale ``block`` (``[O, k]``) and tensor scale ``g``, with its best
    pin (each element pinned toward its own sign); float32 arithmetic (the chosen grid's objective
    is recomputed in float64)."""
    grid = p.template
    step = (block * g).float().unsqueeze(-1)
    q = round_to_format(p.w / step, grid.fmt, grid.rounding) * step
    e = p.w - q
    he = torch.einsum("kgh,okh->okg", p.hb32, e)
    base = (e * he).sum(-1)
    d = q - p.sign * (grid.fmt.max_normal * step)
    cost = (2 * he + d * p.hdiag) * d + p.barrier
    extra, col = cost.min(-1)
    err = base + extra
    free = block <= grid.scale_format.min_value  # the rule gives the smallest scale back from any smaller amax
    unpinned = free & (base <= err)
    return _Choice(torch.where(unpinned, base, err), block, torch.where(unpinned, -1, col),
                   p.sign.gather(-1, col.unsqueeze(-1)).squeeze(-1))


def _block_candidates(p: _Problem, g: float, rule: Optional[torch.Tensor], four_over_six: bool) -> list:
    """Candidate block scales ``[O, k]`` for tensor scale ``g`` (the rule's first)."""
    raw = (p.amax / p.template.fmt.max_normal) / g
    r = _to_scale(raw, p.template) if rule is None else rule
    out = [r] + [_to_scale(r * f, p.template) for f in FACTORS]
    if four_over_six:
        out.append(_to_scale(raw * FOUR_OVER_SIX, p.template))
    return out


def _search_at(p: _Problem, g: float, rule: Optional[torch.Tensor], four_over_six: bool,
               two_level: bool) -> Tuple[_Choice, float, torch.Tensor]:
    """Best choice per block at tensor scale ``g``, its total, and which blocks took the 4-over-6 scale."""
    cands = _block_candidates(p, g, rule, four_over_six)
    best = None
    for s in cands:
        c = _evaluate(p, s, g)
        best = c if best is None else best.where(c.err < best.err, c)
    fos = torch.zeros_like(best.err, dtype=torch.bool)
    if four_over_six:
        fos = torch.stack([best.block == s for s in cands[:-1]]).any(0).logical_not()
    if two_level:  # one block must hold the tensor's amax: scale 448 and a pin
        sf = p.template.scale_format
        top = _evaluate(p, torch.full_like(best.block, sf.max_value), g)
        extra = (top.err - best.err).flatten()
        at = int(torch.argmin(extra))
        mask = torch.zeros_like(extra, dtype=torch.bool)
        mask[at] = True
        mask = mask.reshape(best.err.shape)
        best = best.where(mask, top)
        fos = fos & ~mask
    return best, float(best.err.double().sum()), fos


def _check_factors(tensor_factors: Sequence[float], four_over_six: bool, pins: str) -> Tuple[float, ...]:
    if pins not in PINS:
        raise ValueError(f"two_level_search pins must be one of {', '.join(PINS)}, got {pins!r}")
    if not isinstance(four_over_six, bool):
        raise ValueError(f"two_level_search four_over_six must be a bool, got {four_over_six!r}")
    try:
        factors = [float(c) for c in tensor_factors]
    except (TypeError, ValueError):
        raise ValueError(f"two_level_search tensor_factors must be a list of positive floats (factors of the rule's "
                         f"tensor scale), got {tensor_factors!r}") from None
    if not factors or any(not math.isfinite(c) or c <= 0 for c in factors):
        raise ValueError(f"two_level_search tensor_factors must be positive finite floats, got {tensor_factors!r}")
    return tuple([1.0] + [c for c in factors if c != 1.0])


@torch.no_grad()
def two_level_grid(w: torch.Tensor, h: torch.Tensor, grid: WeightGrid, *, two_level: bool = True,
                   tensor_factors: Sequence[float] = TENSOR_FACTORS, four_over_six: bool = True,
                   pins: str = "largest") -> SearchResult:
    """The searched grid for ``w`` (``[O, I]``) under ``h`` (``[I, I]``), starting from the layer's
    rule grid ``grid`` (:func:`groupquant.calib.weight_grid.rule_grid`; minifloat block scales).

    two_level: the layer has a per-tensor scale (NVFP4); False (single-level, ``g = 1``) searches
    the block scales only. tensor_factors: candidates for ``g / g_rule``; four_over_six: add the
    block scale that maps the block maximum to 4 (module doc); pins: ``'largest'`` pins each block's
    largest element (as the rule's grid; what GPTQ sweeps best, measured), ``'cheapest'`` the one
    whose pin adds least to the block objective.
    """
    factors = _check_factors(tensor_factors, four_over_six, pins)
    sf = grid.scale_format
    if sf is None or not sf.is_coded or sf.is_power_of_two:
        raise ValueError("two_level_search needs minifloat block scales (NVFP4's UE4M3); "
                         f"got {getattr(sf, 'name', sf)}")
    for what, t in (("weight", w), ("H (the input second moment)", h)):
        if not bool(torch.isfinite(t).all()):
            raise ValueError(f"two_level_search: the {what} holds {int((~torch.isfinite(t)).sum())} non-finite "
                             "value(s) (NaN / Inf); calibrate on finite activations")
    p = _problem(w, h, grid, pins)
    g0 = float(grid.tensor_scale) if two_level else 1.0
    rule = _to_scale(grid.scale / g0, grid)
    if not two_level:
        factors = (1.0,)
    best = None
    for c in factors:
        g = float(torch.tensor(c * g0, dtype=torch.float32))
        if not (math.isfinite(g) and g >= MIN_TENSOR_SCALE):
            continue
        choice, total, fos = _search_at(p, g, rule if c == 1.0 else None, four_over_six, two_level)
        if best is None or total < best[1]:
            best = (choice, total, fos, c, g)
    choice, total, fos, c, g = best
    out = WeightGrid(grid.fmt, grid.group_size, (choice.block * g).float(), grid.rounding, choice.pin,
                     choice.sign, sf, g if two_level else grid.tensor_scale)
    objective = float(block_errors(w, out.quantize(w), h, grid.group_size).sum())
    return SearchResult(out, c, objective, float(fos.float().mean()), choice.block)


@torch.no_grad()
def two_level_layer_grid(layer: nn.Module, w: torch.Tensor, h: torch.Tensor, grid: WeightGrid,
                         **options) -> WeightGrid:
    """The layer method: :func:`two_level_grid` for a layer with minifloat block scales (NVFP4,
    with or without its tensor scale); power-of-two (MX) layers get the scale search's grid."""
    sf = grid.scale_format
    if sf is None or sf.is_power_of_two:
        return search_grid(w, h, grid)
    spec = layer.weight_spec
    return two_level_grid(w, h, grid, two_level=bool(spec.tensor_scale), **options).grid
