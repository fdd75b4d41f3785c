"""GroupLayout: contracted shapes, padding, contract/expand round trips along any dim, bad arguments."""
from __future__ import annotations

import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupquant.ops import GroupLayout
from groupquant.ops.group_layout import normalize_block_size


def test_weight_layout_last_dim():
    lay = GroupLayout.build(torch.Size([4, 64]), -1, 32)
    assert (lay.dim, lay.block_size, lay.num_groups, lay.pad) == (1, 32, 2, 0)
    assert lay.contracted_shape == (4, 2, 32)
    assert lay.scale_shape == (4, 2, 1)
    assert lay.reduce_dim == 2
    x = torch.arange(256.0).view(4, 64)
    xg = lay.contract(x)
    assert torch.equal(xg[1, 1], x[1, 32:64])  # group 1 of row 1 holds elements 32..63


def test_padding_is_zero_and_removed():
    lay = GroupLayout.build(torch.Size([3, 70]), 1, 32)
    assert (lay.num_groups, lay.pad, lay.dim_size) == (3, 26, 70)
    x = torch.randn(3, 70)
    xg = lay.contract(x)
    assert xg.shape == (3, 3, 32)
    assert torch.equal(xg[:, 2, 6:], torch.zeros(3, 26))
    assert torch.equal(xg.reshape(3, 96)[:, :70], x)
    assert torch.equal(lay.expand(xg), x)


def test_dim_other_than_last():
    x = torch.randn(2, 40, 5)
    lay = GroupLayout.build(x.shape, 1, 16)
    assert lay.contracted_shape == (2, 3, 16, 5) and lay.scale_shape == (2, 3, 1, 5)
    xg = lay.contract(x)
    assert torch.equal(xg[1, 0, :, 3], x[1, 0:16, 3])
    assert torch.equal(xg[1, 2, :8, 3], x[1, 32:40, 3])
    assert torch.equal(xg[1, 2, 8:, 3], torch.zeros(8))
    assert torch.equal(lay.expand(xg), x)
    lay0 = GroupLayout.build(x.shape, 0, 2)
    assert lay0.contracted_shape == (1, 2, 40, 5)
    assert GroupLayout.build(x.shape, -3, 2) == lay0


def test_expand_scale_broadcasts_each_group_scale_over_its_elements():
    lay = GroupLayout.build(torch.Size([2, 10]), 1, 4)
    s = torch.arange(6.0).view(2, 3, 1)
    full = lay.expand_scale(s)
    assert full.shape == (2, 10)
    assert full[0].tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2]
    assert full[1].tolist() == [3, 3, 3, 3, 4, 4, 4, 4, 5, 5]


@pytest.mark.parametrize("block", [None, 0])
def test_block_size_none_or_zero_is_the_whole_dim(block):
    lay = GroupLayout.build(torch.Size([3, 50, 2]), 1, block)
    assert (lay.block_size, lay.num_groups, lay.pad) == (50, 1, 0)
    assert lay.contracted_shape == (3, 1, 50, 2)


@pytest.mark.parametrize("block", [5, 6, 32, 2 ** 31, sys.maxsize])
def test_block_at_least_the_dim_is_the_whole_dim(block):
    # exactly as block_size=None: one block of the dim's size, no padding (never a huge allocation)
    lay = GroupLayout.build(torch.Size([3, 5]), 1, block)
    assert lay == GroupLayout.build(torch.Size([3, 5]), 1, None)
    assert (lay.block_size, lay.num_groups, lay.pad) == (5, 1, 0)
    x = torch.randn(3, 5)
    assert torch.equal(lay.expand(lay.contract(x)), x)


@pytest.mark.parametrize("block", [2 ** 63, 2 ** 64, 10 ** 30])
def test_block_beyond_int64_is_an_error_naming_block_size(block):
    with pytest.raises(ValueError, match="block_size"):
        GroupLayout.build(torch.Size([3, 5]), 1, block)


def test_empty_dims():
    lay = GroupLayout.build(torch.Size([0, 64]), 1, 32)
    assert lay.contract(torch.empty(0, 64)).shape == (0, 2, 32)
    lay = GroupLayout.build(torch.Size([4, 0]), 1, 32)
    assert lay.num_groups == 0
    assert lay.expand(lay.contract(torch.empty(4, 0))).shape == (4, 0)
    assert normalize_block_size(None, 0) == 1


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), data=st.data())
def test_contract_expand_round_trip(shape, data):
    ndim = len(shape)
    dim = data.draw(st.integers(-ndim, ndim - 1))
    block = data.draw(st.one_of(st.none(), st.integers(0, 12)))
    x = torch.randn(*shape)
    lay = GroupLayout.build(x.shape, dim, block)
    d = dim % ndim
    b = shape[d] if not block or block >= shape[d] else block
    k = -(-shape[d] // b)
    assert lay.contracted_shape == tuple(shape[:d]) + (k, b) + tuple(shape[d + 1:])
    xg = lay.contract(x)
    assert xg.shape == lay.contracted_shape
    assert torch.equal(lay.expand(xg), x)
    # the padded tail holds zeros only, and each group is a contiguous run of the dim
    flat = xg.movedim(d, -1).movedim(d, -1).reshape(-1, k * b)
    assert torch.equal(flat[:, shape[d]:], torch.zeros_like(flat[:, shape[d]:]))
    assert torch.equal(flat[:, :shape[d]], x.movedim(d, -1).reshape(-1, shape[d]))


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="dim"):
        GroupLayout.build(torch.Size([4, 8]), 2, 4)
    with pytest.raises(ValueError, match="dim"):
        GroupLayout.build(torch.Size([4, 8]), -3, 4)
    with pytest.raises(ValueError, match="dim"):
        GroupLayout.build(torch.Size([4, 8]), 1.0, 4)
    with pytest.raises(ValueError, match="dim"):
        GroupLayout.build(torch.Size([4, 8]), True, 4)
    with pytest.raises(ValueError, match="0-d"):
        GroupLayout.build(torch.Size([]), 0, 4)
    with pytest.raises(ValueError, match="block_size"):
        GroupLayout.build(torch.Size([4, 8]), 1, -1)
    with pytest.raises(TypeError, match="block_size"):
        GroupLayout.build(torch.Size([4, 8]), 1, 2.0)
    with pytest.raises(TypeError, match="block_size"):
        GroupLayout.build(torch.Size([4, 8]), 1, True)
    with pytest.raises(TypeError, match="block_size"):
        GroupLayout.build(torch.Size([4, 8]), 1, "32")
    lay = GroupLayout.build(torch.Size([4, 8]), 1, 4)
    with pytest.raises(ValueError, match="shape"):
        lay.contract(torch.zeros(4, 9))
