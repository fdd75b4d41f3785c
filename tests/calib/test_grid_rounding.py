"""The look-up rounding of GPTQ's column sweep against ``round_to_format`` (the reference), bit for
bit, on every grid value, every midpoint (the ties), their float32 neighbours, values beyond the
range, zeros of both signs and random values."""
from __future__ import annotations

import pytest
import torch

from groupquant.calib.grid_rounding import lookup_rounder
from groupquant.formats import get_format
from groupquant.ops import round_to_format

FORMATS = ["fp4_e2m1", "fp6_e2m3", "fp6_e3m2", "fp8_e4m3", "fp8_e5m2", "float_fnuz_e4m3"]


def _probe_values(fmt) -> torch.Tensor:
    pos = fmt.values().float()
    pos = pos[pos >= 0]
    mids = (pos[:-1] + pos[1:]) / 2
    base = torch.cat([pos, mids, torch.tensor([fmt.max_normal * 1.5, fmt.max_normal * 64, 3e38, float("inf")]),
                      torch.rand(2000, generator=torch.Generator().manual_seed(0)) * fmt.max_normal * 1.2])
    up = torch.nextafter(base, torch.full_like(base, float("inf")))
    down = torch.nextafter(base, torch.zeros_like(base))
    v = torch.cat([base, up, down])
    return torch.cat([v, -v])


@pytest.mark.parametrize("name", FORMATS)
def test_lookup_rounding_is_round_to_format_bit_for_bit(name: str) -> None:
    fmt = get_format(name)
    rounder = lookup_rounder(fmt, "even", torch.device("cpu"))
    assert rounder is not None
    x = _probe_values(fmt)
    got, want = rounder(x), round_to_format(x, fmt, "even")
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))  # (the sign of zero too)


def test_where_the_table_does_not_apply_there_is_none() -> None:
    cpu = torch.device("cpu")
    assert lookup_rounder(get_format("fp4_e2m1"), "nearest", cpu) is None
    assert lookup_rounder(get_format("int8"), "even", cpu) is None
    assert lookup_rounder(get_format("fp8_e4m3"), "even", cpu, saturating=False) is None
