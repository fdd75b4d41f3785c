"""The block Walsh-Hadamard transform against the dense Sylvester matrix (float64), orthogonality."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupquant.ops.hadamard import block_hadamard_matrix, check_block_size, fwht, hadamard_matrix


def sylvester_by_entries(n: int) -> torch.Tensor:
    """H[i, j] = (-1)^popcount(i & j) / sqrt(n): the Sylvester matrix written entry by entry."""
    i = torch.arange(n)
    bits = torch.bitwise_and(i[:, None], i[None, :])
    parity = torch.zeros_like(bits)
    while bits.any():
        parity ^= bits & 1
        bits = bits >> 1
    return (1 - 2 * parity).double() / math.sqrt(n)


@pytest.mark.parametrize("b", [1, 2, 4, 8, 16, 32, 64, 128])
def test_matrix_is_the_sylvester_matrix_and_orthogonal(b):
    h = hadamard_matrix(b)
    assert torch.equal(h, sylvester_by_entries(b))
    torch.testing.assert_close(h @ h.T, torch.eye(b, dtype=torch.float64), rtol=0, atol=1e-14)
    assert torch.equal(h, h.T)


@settings(deadline=None, max_examples=40)
@given(log_b=st.integers(0, 6), blocks=st.integers(1, 4), rows=st.integers(1, 5), seed=st.integers(0, 2**31 - 1))
def test_fwht_equals_the_dense_block_diagonal_matrix_in_float64(log_b, blocks, rows, seed):
    b = 2 ** log_b
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 3, blocks * b, generator=g, dtype=torch.float64)
    dense = x @ torch.block_diag(*[sylvester_by_entries(b)] * blocks)
    torch.testing.assert_close(fwht(x, b), dense, rtol=0, atol=1e-12)
    torch.testing.assert_close(block_hadamard_matrix(blocks * b, b), torch.block_diag(*[sylvester_by_entries(b)] * blocks))


def test_fwht_is_its_own_inverse_and_keeps_norms():
    x = torch.randn(7, 96, dtype=torch.float64)
    torch.testing.assert_close(fwht(fwht(x, 32), 32), x, rtol=0, atol=1e-13)
    torch.testing.assert_close(fwht(x, 32).norm(dim=-1), x.norm(dim=-1), rtol=1e-14, atol=0)


def test_fwht_keeps_dtype_and_shape():
    x = torch.randn(2, 3, 64, dtype=torch.bfloat16)
    y = fwht(x, 16)
    assert y.dtype == torch.bfloat16 and y.shape == x.shape


@pytest.mark.parametrize("b", [0, 3, 12, -4, 2.0, True])
def test_block_size_must_be_a_power_of_two(b):
    with pytest.raises(ValueError, match="power of two"):
        check_block_size(b)


def test_block_size_must_divide_the_features():
    with pytest.raises(ValueError, match="block_size=32 does not divide the 48 features"):
        fwht(torch.randn(2, 48), 32)


@pytest.mark.parametrize("b", [2, 4, 32, 128])
def test_gradient_is_the_transposed_dense_matrix_in_float64(b):
    g = torch.Generator().manual_seed(b)
    x = torch.randn(5, 2 * b, generator=g, dtype=torch.float64, requires_grad=True)
    upstream = torch.randn(5, 2 * b, generator=g, dtype=torch.float64)
    fwht(x, b).backward(upstream)
    dense = torch.block_diag(*[sylvester_by_entries(b)] * 2)
    torch.testing.assert_close(x.grad, upstream @ dense.T, rtol=0, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: fwht(t, b), (x.detach().clone().requires_grad_(True),))


def _stacked_reference(x: torch.Tensor, b: int) -> torch.Tensor:
    """The butterfly written as torch ops that autograd records (the form the transform had before
    its in-place passes): the same additions, in the same order."""
    n = x.shape[-1]
    y = x.reshape(-1, n // b, b)
    h = 1
    while h < b:
        pairs = y.reshape(y.shape[0], n // b, b // (2 * h), 2, h)
        y = torch.stack((pairs[..., 0, :] + pairs[..., 1, :], pairs[..., 0, :] - pairs[..., 1, :]), dim=-2).reshape(y.shape)
        h *= 2
    return (y * (1.0 / math.sqrt(b))).reshape(x.shape)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("b", [2, 8, 32, 64])
def test_in_place_passes_round_like_the_butterfly_bit_for_bit(b, dtype):
    """Values over many binades, NaN / Inf, a non-contiguous input; with and without autograd."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 4 * b, generator=g) * torch.exp2(torch.randint(-20, 20, (6, 4 * b), generator=g).float())
    x[0, 3], x[1, 5], x[2, 0] = float("nan"), float("inf"), float("-inf")
    x = x.to(dtype)
    for t in (x, x.T.contiguous().T, x[:, :].clone().requires_grad_(True)):
        assert torch.equal(fwht(t, b).detach().view(torch.int16 if dtype != torch.float32 else torch.int32),
                           _stacked_reference(t.detach(), b).view(torch.int16 if dtype != torch.float32 else torch.int32))


def test_compiled_transform_equals_eager_bit_for_bit():
    x = torch.randn(8, 96) * torch.exp2(torch.arange(96).float() % 24 - 12)
    compiled = torch.compile(lambda t: fwht(t, 32), backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(x), fwht(x, 32))
