"""QuantMatMul: activation x activation products against the composition fake_quant + torch.matmul,
forward and backward (dA = Q(dC | N) Q(B | N)^T, dB = Q(A | M)^T Q(dC | M)), with broadcasting."""
import pytest
import torch

import groupquant as gq
from groupquant.nn import QuantMatMul, quant_matmul
from groupquant.quantizers import MXFloat4e2m1Act, MXFloat8e4m3Act, MXFloat8e5m2Act


def _spread(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * torch.logspace(-5, 5, shape[-1], base=2.0) * torch.logspace(
        3, -3, shape[-2], base=2.0).unsqueeze(-1)


def _fq(t, fmt, dim):
    return gq.fake_quant(t, fmt, 32, dim)


@pytest.mark.parametrize("a_shape, b_shape", [((2, 3, 40, 70), (2, 3, 70, 36)),   # attention Q K^T-like, K=70 padded
                                              ((2, 3, 40, 70), (70, 36)),         # broadcast b
                                              ((40, 70), (4, 70, 36))])           # broadcast a
def test_forward_and_backward_equal_the_composition(a_shape, b_shape):
    mm = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act)
    a, b = _spread(*a_shape, seed=1), _spread(*b_shape, seed=2)
    ai, bi = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    c = mm(ai, bi)
    dc = _spread(*c.shape, seed=3)
    c.backward(dc)
    assert torch.equal(c.detach(), torch.matmul(_fq(a, "fp8_e4m3", -1), _fq(b, "fp8_e4m3", -2)))
    da = torch.matmul(_fq(dc, "fp8_e5m2", -1), _fq(b, "fp8_e4m3", -1).transpose(-1, -2)).sum_to_size(a.shape)
    db = torch.matmul(_fq(a, "fp8_e4m3", -2).transpose(-1, -2), _fq(dc, "fp8_e5m2", -2)).sum_to_size(b.shape)
    assert torch.equal(ai.grad, da) and torch.equal(bi.grad, db)


def test_per_gemm_overrides_and_keywords():
    mm = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act,
                     b_quant_for_grad_a=MXFloat4e2m1Act, grad_output_for_grad_b_group_size=16)
    a, b = _spread(6, 64, seed=4), _spread(64, 48, seed=5)
    ai, bi = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    c = mm(ai, bi)
    dc = _spread(6, 48, seed=6)
    c.backward(dc)
    assert torch.equal(ai.grad, _fq(dc, "fp8_e5m2", -1) @ _fq(b, "fp4_e2m1", -1).t())
    assert torch.equal(bi.grad, _fq(a, "fp8_e4m3", -2).t() @ gq.fake_quant(dc, "fp8_e5m2", 16, -2))


def test_without_backward_quantization_the_gradient_is_straight_through():
    mm = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act)
    a, b = _spread(6, 64, seed=7), _spread(64, 48, seed=8)
    ai = a.clone().requires_grad_(True)
    mm(ai, b).backward(torch.ones(6, 48))
    assert torch.equal(ai.grad, torch.ones(6, 48) @ _fq(b, "fp8_e4m3", -2).t())


def test_functional_form_reuses_one_module_and_checks_its_input():
    a, b = _spread(2, 8, 64, seed=9), _spread(2, 64, 8, seed=10)
    out = quant_matmul(a, b, a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act)
    assert torch.equal(out, torch.matmul(_fq(a, "fp8_e4m3", -1), _fq(b, "fp8_e4m3", -2)))
    with pytest.raises(ValueError, match="at least 2 dims"):
        quant_matmul(torch.randn(64), b, a_quant=MXFloat8e4m3Act)
    with pytest.raises(ValueError, match="did you mean 'a_group_size'"):
        QuantMatMul(a_quant=MXFloat8e4m3Act, a_group_sise=16)
