"""Under mx_mapping injection, the backward of the compat layers (groupquant's quant-layer route) calls
torch's own functions, not the injected ones: gradients equal those of the compat call made directly."""
from __future__ import annotations

import torch

from groupquant.compat.microxcaling import finalize_mx_specs, linear, matmul
from groupquant.compat.microxcaling.mx_mapping import injected_pyt_ops

SPECS = finalize_mx_specs(dict(a_elem_format="fp4_e2m1", w_elem_format="fp4_e2m1", a_elem_format_bp_os="fp8_e5m2",
                               block_size=32, bfloat=16))


def _grads(fn, *tensors, grad, specs=None):
    leaves = [t.clone().requires_grad_() for t in tensors]
    if specs is None:
        fn(*leaves).backward(grad)
    else:
        with injected_pyt_ops(specs):
            fn(*leaves).backward(grad)
    return [t.grad for t in leaves]


def test_matmul_and_linear_backward_under_injection():
    torch.manual_seed(0)
    a, b, w, g = torch.randn(3, 8, 64), torch.randn(3, 64, 40), torch.randn(40, 64), torch.randn(3, 8, 40)
    direct = _grads(lambda x, y: matmul(x, y, mx_specs=SPECS), a, b, grad=g)
    injected = _grads(lambda x, y: torch.matmul(x, y), a, b, grad=g, specs=SPECS)
    assert all(torch.equal(p, q) for p, q in zip(direct, injected))
    direct = _grads(lambda x, v: linear(x, v, mx_specs=SPECS), a, w, grad=g)
    injected = _grads(lambda x, v: torch.nn.functional.linear(x, v), a, w, grad=g, specs=SPECS)
    assert all(torch.equal(p, q) for p, q in zip(direct, injected))
