"""inject_pyt_ops swaps torch's entries for the compat ones and restore_pyt_ops puts them back."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from groupquant.compat.microxcaling import Linear, MxSpecs, linear, mx_mapping
from groupquant.compat.microxcaling.mx_mapping import inject_pyt_ops, injected_pyt_ops, restore_pyt_ops

SPECS = MxSpecs(w_elem_format="fp4_e2m1", a_elem_format="fp8_e4m3", block_size=32, bfloat=16)


def _originals():
    return (torch.nn.Linear, torch.nn.LayerNorm, F.linear, F.softmax, torch.matmul, torch.add, torch.exp, torch.sum)


def test_inject_swaps_and_restore_puts_back():
    before = _originals()
    x, w = torch.randn(4, 64), torch.randn(8, 64)
    try:
        inject_pyt_ops(SPECS)
        layer = torch.nn.Linear(64, 8)
        assert isinstance(layer, Linear) and layer.mx_specs["w_elem_format"] == "fp4_e2m1"
        assert torch.equal(F.linear(x, w), linear(x, w, mx_specs=SPECS))
        assert not torch.equal(F.linear(x, w), x @ w.t())
        assert torch.equal(torch.add(x, x, alpha=2), x + 2 * x)          # arguments it does not take: torch's
        assert torch.sum(x, dtype=torch.float64).dtype == torch.float64  # dtype casts the result
        inject_pyt_ops(SPECS)                                            # a second injection does not stack
        saved = [original for _, _, original in mx_mapping._SAVED]
        assert saved and not any(getattr(o, "__groupquant_injected__", False) for o in saved)
    finally:
        restore_pyt_ops()
    assert _originals() == before


def test_context_manager_restores_after_an_error():
    before = _originals()
    try:
        with injected_pyt_ops(SPECS):
            assert torch.nn.Linear is not before[0]
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert _originals() == before
