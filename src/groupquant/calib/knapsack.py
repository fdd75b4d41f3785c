"""Multiple-choice knapsacks of :func:`groupquant.calib.auto_precision`: one candidate per layer,
least total sensitivity, integer costs within a capacity.

:func:`assign_two`: two costs per choice (weight bits and activation bits), each with its own
capacity; :func:`assign`: one cost per choice (weight storage bits), the same programme with a
single activation state. A dynamic programme over the integer costs, exact unless the table would
exceed :data:`MAX_STATES` states, when the costs are rounded up to a coarser unit (every answer
then still fits, but may not be the optimum).

:func:`assign_two` first subtracts each layer's cheapest cost from its costs and from the capacity
(every assignment pays those anyway), then divides by the gcd of what is left: a dimension in which
every layer's candidates cost the same (e.g. MXFP4 weights in every candidate) becomes a single
state, so the table is usually small and the answer exact.
"""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

__all__ = ["assign", "assign_two", "MAX_STATES"]

#: Largest dynamic-programming table (cost states) before the bit costs are coarsened.
MAX_STATES = 2_000_000


def assign(costs: Sequence[Sequence[int]], sensitivity: Sequence[Sequence[float]],
           capacity: int) -> Tuple[List[int], bool]:
    """The candidate index per layer minimising ``sum(sensitivity[l][c])`` subject to
    ``sum(costs[l][c]) <= capacity`` (integers), and whether the answer is exact (False when the
    costs had to be coarsened, module doc): :func:`assign_two` with activations that cost nothing.
    A ValueError when even the cheapest choice does not fit."""
    return assign_two(costs, [[0] * len(row) for row in costs], sensitivity, capacity, 0)


def _reduced(costs: Sequence[Sequence[int]], capacity: int) -> Tuple[List[List[int]], int, int]:
    """Costs and capacity less each layer's cheapest cost, divided by the gcd of what is left:
    ``(costs, capacity, unit)``; the capacity is negative when even the cheapest choices do not fit."""
    base = [min(int(c) for c in row) for row in costs]
    left = [[int(c) - b for c in row] for row, b in zip(costs, base)]
    unit = 0
    for row in left:
        for c in row:
            unit = math.gcd(unit, c)
    unit = max(unit, 1)
    spare = capacity - sum(base)
    return [[c // unit for c in row] for row in left], (spare // unit if spare >= 0 else -1), unit


def _coarsen(cost: List[List[int]], cap: int, states: int) -> Tuple[List[List[int]], int]:
    """Costs rounded up and the capacity rounded down to a unit leaving at most ``states`` states."""
    if cap + 1 <= states:
        return cost, cap
    unit = -(-cap // max(states - 1, 1))
    return [[-(-c // unit) for c in row] for row in cost], cap // unit


def _total(picks: Sequence[int], table: Sequence[Sequence[float]]) -> float:
    return float(sum(table[layer][c] for layer, c in enumerate(picks)))


def assign_two(weight_costs: Sequence[Sequence[int]], activation_costs: Sequence[Sequence[int]],
               sensitivity: Sequence[Sequence[float]], weight_capacity: int,
               activation_capacity: int) -> Tuple[List[int], bool]:
    """The candidate index per layer minimising ``sum(sensitivity[l][c])`` subject to
    ``sum(weight_costs[l][c]) <= weight_capacity`` and ``sum(activation_costs[l][c]) <=
    activation_capacity`` (integers), and whether the answer is exact (module doc).

    When coarsened, the answer is the best of the table's, of every uniform choice (one candidate
    index for all layers) and of each layer's fewest weight bits, among those that fit: never worse
    than the best feasible uniform choice. A ValueError names the budget that even the cheapest choices miss, or says that no
    choice meets both."""
    for name, costs, cap in (("weight", weight_costs, weight_capacity),
                             ("activation", activation_costs, activation_capacity)):
        cheapest = sum(min(int(c) for c in row) for row in costs)
        if cheapest > cap:
            raise ValueError(f"{name} budget of {cap} bits is below the cheapest {name} assignment ({cheapest} bits)")
    cw, capw, _ = _reduced(weight_costs, weight_capacity)
    ca, capa, _ = _reduced(activation_costs, activation_capacity)
    exact = (capw + 1) * (capa + 1) <= MAX_STATES
    if not exact:
        side = math.isqrt(MAX_STATES)
        if min(capw, capa) + 1 <= side:  # one dimension small: the other takes the rest of the table
            small = min(capw, capa) + 1
            if capw >= capa:
                cw, capw = _coarsen(cw, capw, MAX_STATES // small)
            else:
                ca, capa = _coarsen(ca, capa, MAX_STATES // small)
        else:
            cw, capw = _coarsen(cw, capw, side)
            ca, capa = _coarsen(ca, capa, side)
    picks = _table_two(cw, ca, sensitivity, capw, capa)
    if exact:
        if picks is None:
            raise ValueError("no assignment meets both the weight and the activation budget (the candidates that "
                             "are cheapest in weights are not the cheapest in activations)")
        return picks, True
    options = [] if picks is None else [picks]
    count = min(len(row) for row in sensitivity) if sensitivity else 0
    cheapest = [min(range(len(row)), key=row.__getitem__) for row in weight_costs]  # each layer's fewest weight bits
    for pick in [[index] * len(sensitivity) for index in range(count)] + [cheapest]:
        if _total(pick, weight_costs) <= weight_capacity and _total(pick, activation_costs) <= activation_capacity:
            options.append(pick)
    if not options:
        raise ValueError("no assignment was found within both the weight and the activation budget (costs "
                         f"coarsened to fit {MAX_STATES} states); raise a budget")
    return min(options, key=lambda p: _total(p, sensitivity)), False


def _table_two(cw: List[List[int]], ca: List[List[int]], sensitivity: Sequence[Sequence[float]],
               capw: int, capa: int) -> Optional[List[int]]:
    """The dynamic programme over (weight, activation) cost states; None when nothing fits."""
    dp = np.full((capw + 1, capa + 1), np.inf)
    dp[0, 0] = 0.0
    choice = np.zeros((len(cw), capw + 1, capa + 1), dtype=np.int16)
    for layer, (roww, rowa, sens) in enumerate(zip(cw, ca, sensitivity)):
        new = np.full_like(dp, np.inf)
        for index, (kw, ka, s) in enumerate(zip(roww, rowa, sens)):
            if kw > capw or ka > capa:
                continue
            cand = np.full_like(dp, np.inf)
            cand[kw:, ka:] = dp[: capw + 1 - kw, : capa + 1 - ka] + float(s)
            better = cand < new
            new[better] = cand[better]
            choice[layer][better] = index
        dp = new
    if not np.isfinite(dp).any():
        return None
    atw, ata = (int(i) for i in np.unravel_index(int(np.argmin(dp)), dp.shape))
    out = [0] * len(cw)
    for layer in range(len(cw) - 1, -1, -1):
        out[layer] = int(choice[layer, atw, ata])
        atw -= cw[layer][out[layer]]
        ata -= ca[layer][out[layer]]
    return out
