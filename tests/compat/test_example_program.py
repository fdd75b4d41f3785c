"""A microxcaling-style program after the one-line import edit: a residual MLP built by injection
(torch.nn / F entries replaced) equals the same MLP written with the compat layers by hand."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from groupquant.compat.microxcaling import GELU, LayerNorm, Linear, finalize_mx_specs, mx_mapping

SPECS = {"w_elem_format": "fp6_e3m2", "a_elem_format": "fp6_e3m2", "block_size": 32, "bfloat": 16,
         "custom_cuda": True, "quantize_backprop": False}


class PlainMLP(torch.nn.Module):
    """Written against torch only, as a program that relies on injection is."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.up = torch.nn.Linear(hidden, 4 * hidden)
        self.down = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


def _run(model: torch.nn.Module, x: torch.Tensor):
    x = x.clone().requires_grad_()
    y = model(x)
    y.backward(torch.ones_like(y))
    return y.detach(), x.grad


def test_injected_program_equals_hand_written_compat_program():
    specs = finalize_mx_specs(dict(SPECS))  # custom_cuda is accepted on a CPU-only machine
    torch.manual_seed(0)
    x = torch.randn(16, 64)
    try:
        mx_mapping.inject_pyt_ops(specs)
        torch.manual_seed(1)
        injected = PlainMLP(64)
        got = _run(injected, x)
    finally:
        mx_mapping.restore_pyt_ops()
    assert isinstance(injected.up, Linear) and isinstance(injected.norm, LayerNorm)

    manual = torch.nn.ModuleDict({"norm": LayerNorm(64, mx_specs=specs), "up": Linear(64, 256, mx_specs=specs),
                                  "down": Linear(256, 64, mx_specs=specs), "act": GELU(mx_specs=specs)})
    manual.load_state_dict({k: v for k, v in injected.state_dict().items()}, strict=False)
    hand = lambda t: t + manual["down"](manual["act"](manual["up"](manual["norm"](t))))  # noqa: E731
    want = _run(hand, x)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    plain = PlainMLP(64)
    plain.load_state_dict(injected.state_dict())
    assert not torch.equal(plain(x), got[0])  # the injection did change the numerics
