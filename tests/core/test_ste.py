import pytest
import torch

from groupquant.core import round_ste, round_to_format_ste
from groupquant.formats import FloatFormat, IntFormat
from groupquant.ops import round_to_format


def test_round_ste_forward_and_identity_gradient():
    x = torch.tensor([0.5, 1.5, -2.4], requires_grad=True)
    y = round_ste(x)
    assert y.tolist() == [0.0, 2.0, -2.0]
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("fmt", [FloatFormat(2, 1), IntFormat(8), IntFormat(4, signed=False)])
def test_forward_equals_round_to_format(fmt):
    y = torch.randn(100) * 4
    assert torch.equal(round_to_format_ste(y, fmt), round_to_format(y, fmt))


def test_identity_and_clipped_gradients():
    fmt = FloatFormat(2, 1)  # max 6
    y = torch.tensor([-7.0, -6.0, 1.2, 6.0, 6.5], requires_grad=True)
    round_to_format_ste(y, fmt, ste="identity").sum().backward()
    assert y.grad.tolist() == [1.0] * 5
    y.grad = None
    round_to_format_ste(y, fmt, ste="clipped").sum().backward()
    assert y.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]


def test_clipped_range_of_unsigned_and_wide_int():
    u = torch.tensor([-0.5, 0.5], requires_grad=True)
    round_to_format_ste(u, IntFormat(8, signed=False), ste="clipped").sum().backward()
    assert u.grad.tolist() == [0.0, 1.0]
    i = torch.tensor([-2.0, -2.01], requires_grad=True)  # int8 wide range reaches -128/64 = -2
    round_to_format_ste(i, IntFormat(8, narrow_range=False), ste="clipped").sum().backward()
    assert i.grad.tolist() == [1.0, 0.0]


def test_bad_ste():
    with pytest.raises(ValueError, match="ste must be one of"):
        round_to_format_ste(torch.zeros(1), IntFormat(8), ste="straight")
