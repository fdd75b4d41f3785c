import pytest
import torch

from groupquant.core import scaled_round
from groupquant.core.ste import format_lowest
from groupquant.formats import FloatFormat, IntFormat
from groupquant.ops import round_to_format


def _round_ste(y, fmt, ste):
    """round_to_format forward; gradient 1 (identity) or 1 inside the format's range, else 0 (clipped)."""
    rounded = round_to_format(y.detach(), fmt)
    out = y + (rounded - y).detach()
    if ste == "clipped":
        inside = ((y >= format_lowest(fmt)) & (y <= fmt.max_normal)).to(y.dtype)
        out = rounded + (y - y.detach()) * inside
    return out


@pytest.mark.parametrize("fmt", [FloatFormat(2, 1), FloatFormat(4, 3), IntFormat(8), IntFormat(4, signed=False)])
@pytest.mark.parametrize("ste", ["identity", "clipped"])
def test_matches_autograd_of_the_composed_expression(fmt, ste):
    """Independent side: autograd through x / s, the STE rounding and * s."""
    x = (torch.randn(6, 4, 8) * 3).requires_grad_()
    s = torch.rand(6, 4, 1).add(0.1).requires_grad_()
    g = torch.randn(6, 4, 8)
    out = scaled_round(x, s, fmt, ste=ste)
    assert torch.equal(out, round_to_format(x.detach() / s.detach(), fmt) * s.detach())
    out.backward(g)
    x2, s2 = x.detach().clone().requires_grad_(), s.detach().clone().requires_grad_()
    (_round_ste(x2 / s2, fmt, ste) * s2).backward(g)
    assert torch.allclose(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
    assert torch.allclose(s.grad, s2.grad, rtol=1e-4, atol=1e-5)


def test_identity_gradient_to_x_is_exact_and_keeps_dtype():
    x = torch.randn(4, 32, dtype=torch.bfloat16, requires_grad=True)
    out = scaled_round(x, torch.tensor(0.5), FloatFormat(2, 1))
    assert out.dtype == torch.bfloat16
    out.sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))


def test_bad_ste():
    with pytest.raises(ValueError, match="ste must be"):
        scaled_round(torch.zeros(2), torch.tensor(1.0), IntFormat(8), ste="x")
