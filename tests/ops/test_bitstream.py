import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from groupquant.ops.bitstream import pack_bits, packed_nbytes, unpack_bits


def bigint_pack(codes, width):
    """Independent oracle: the stream as one little-endian integer, element i at bit i*width."""
    value = 0
    for i, c in enumerate(codes):
        value |= (int(c) & ((1 << width) - 1)) << (i * width)
    nbytes = -(-len(codes) * width // 8)
    return list(value.to_bytes(nbytes, "little"))


def test_fp4_two_per_byte_first_element_in_low_nibble():
    # 0x1 (0.5) then 0x2 (1.0) -> 0x21; a lone 0xF (-6.0) -> 0x0F with a zero high nibble
    assert pack_bits(torch.tensor([1, 2, 15]), 4).tolist() == [0x21, 0x0F]


def test_fp6_four_values_in_three_bytes_by_hand():
    a, b, c, d = 0b101010, 0b110011, 0b001111, 0b111000
    # byte0 = a | b[1:0] << 6 ; byte1 = b[5:2] | c[3:0] << 4 ; byte2 = c[5:4] | d << 2
    expected = [0b11_101010, 0b1111_1100, 0b111000_00]
    assert pack_bits(torch.tensor([a, b, c, d]), 6).tolist() == expected


def test_eight_bits_are_the_bytes_and_sixteen_bits_little_endian():
    codes = torch.tensor([0x12, 0xAB, 0x00, 0xFF])
    assert pack_bits(codes, 8).tolist() == [0x12, 0xAB, 0x00, 0xFF]
    assert pack_bits(torch.tensor([0x1234, -2]), 16).tolist() == [0x34, 0x12, 0xFE, 0xFF]


@settings(max_examples=60, deadline=None)
@given(width=st.integers(1, 16), data=st.data())
def test_matches_bigint_oracle_and_round_trips(width, data):
    count = data.draw(st.integers(0, 70))
    signed = data.draw(st.booleans()) and width > 1
    lo, hi = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if signed else (0, (1 << width) - 1)
    codes = data.draw(st.lists(st.integers(lo, hi), min_size=count, max_size=count))
    t = torch.tensor(codes, dtype=torch.int32)
    stream = pack_bits(t, width)
    assert stream.dtype == torch.uint8 and stream.numel() == packed_nbytes(count, width)
    assert stream.tolist() == bigint_pack(codes, width)
    assert unpack_bits(stream, width, count, signed=signed).tolist() == codes


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="bit_width"):
        pack_bits(torch.tensor([1]), 17)
    with pytest.raises(ValueError, match="bit_width"):
        packed_nbytes(3, 0)
    with pytest.raises(TypeError, match="integer dtype"):
        pack_bits(torch.tensor([1.0]), 4)
    with pytest.raises(ValueError, match="has 2 bytes"):
        unpack_bits(torch.zeros(3, dtype=torch.uint8), 4, 3)
    with pytest.raises(TypeError, match="uint8"):
        unpack_bits(torch.zeros(2, dtype=torch.int8), 4, 3)
