"""Learning-rate schedule and optimiser construction."""
from __future__ import annotations

import math

import pytest
import torch

from groupquant.calib.qat.schedule import Schedule, build_optimizer


def test_warmup_rises_linearly_then_cosine_decays_to_the_floor():
    s = Schedule(lr=1.0, warmup_steps=4, decay="cosine", min_lr_ratio=0.1)
    assert [s.lr_at(k, 20) for k in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert s.lr_at(4, 20) == pytest.approx(1.0)
    assert s.lr_at(19, 20) == pytest.approx(0.1)
    mid = 4 + (20 - 4 - 1) / 2  # half-way through the decay: the mean of peak and floor
    assert Schedule(lr=1.0, warmup_steps=4, min_lr_ratio=0.1).lr_at(int(mid), 20) == pytest.approx(
        0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * (int(mid) - 4) / 15)))
    values = [s.lr_at(k, 20) for k in range(3, 20)]
    assert all(a >= b for a, b in zip(values, values[1:]))


def test_linear_and_constant():
    assert Schedule(lr=2.0, decay="linear", min_lr_ratio=0.0).lr_at(5, 11) == pytest.approx(1.0)
    assert {Schedule(lr=2.0, decay="constant").lr_at(k, 10) for k in range(10)} == {2.0}
    assert Schedule(lr=1.0).lr_at(0, 1) == 1.0  # one step: the peak


@pytest.mark.parametrize("kwargs,match", [
    (dict(lr=0.0), "lr must be a finite number > 0"),
    (dict(warmup_steps=-1), "warmup_steps must be an int >= 0"),
    (dict(decay="cosin"), "schedule='cosin' is not one of .*did you mean 'cosine'"),
    (dict(min_lr_ratio=2.0), r"min_lr_ratio must lie in \[0, 1\]"),
])
def test_bad_schedules_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Schedule(**kwargs)


def test_weight_decay_applies_to_matrices_only():
    w, b = torch.nn.Parameter(torch.ones(3, 3)), torch.nn.Parameter(torch.ones(3))
    opt = build_optimizer([("w", w), ("b", b)], "adamw", 0.1, 0.01)
    assert isinstance(opt, torch.optim.AdamW)
    assert [(len(g["params"]), g["weight_decay"]) for g in opt.param_groups] == [(1, 0.01), (1, 0.0)]
    assert isinstance(build_optimizer([("w", w)], "sgd", 0.1, 0.0), torch.optim.SGD)
    made = build_optimizer([("w", w)], lambda groups: torch.optim.Adam(groups, lr=0.5), 0.1, 0.0)
    assert made.param_groups[0]["lr"] == 0.5
    with pytest.raises(ValueError, match="optimizer='adamm' is not one of .*did you mean 'adam"):
        build_optimizer([("w", w)], "adamm", 0.1, 0.0)
    with pytest.raises(TypeError, match="must return a torch.optim.Optimizer"):
        build_optimizer([("w", w)], lambda groups: None, 0.1, 0.0)
