import dataclasses

import pytest
import torch

from groupquant.core import QuantSpec, build_tensor_quant
from groupquant.formats import IntFormat
from groupquant.ops import FakeQuantResult
from groupquant.quant_tensor import IntQuantTensor, quant_tensor_from_output
from groupquant.quantizers import Int8WeightPerChannel, Int8WeightPerTensor, Uint8ActPerTensor, quantizer_spec


def _quant(q, x, dims=(1, 0)):
    spec = quantizer_spec(q).with_dims(*dims)
    return quant_tensor_from_output(build_tensor_quant(spec)(x), spec), spec


def test_int_codes_and_scale_of_per_channel_int8():
    w = torch.randn(5, 30)
    q, spec = _quant(Int8WeightPerChannel, w)
    s = w.abs().amax(dim=1, keepdim=True) / 127
    assert isinstance(q, IntQuantTensor) and q.scale.shape == (5, 1)
    assert q.fmt is spec.fmt and q.fmt.frac_bits == 6  # int8 elements are 1.6 fixed point
    # scale is the shared scale X as the op produced it (amax / max_normal, max_normal = 127/64);
    # int_scale = X * 2**-6 is the usual integer convention, value = int * int_scale
    assert torch.equal(q.scale, w.abs().amax(dim=1, keepdim=True) / spec.fmt.max_normal)
    assert torch.equal(q.int_scale, s) and torch.equal(q.scale, s * 64)
    expected = torch.round(w / s).clamp(-127, 127)
    assert q.int().dtype == torch.int8 and torch.equal(q.int().float(), expected)
    assert torch.equal(q.codes(), q.int())
    assert torch.equal((q.int().float() - q.zero_point) * q.int_scale, q.value)
    assert torch.equal((q.int().float() * 2.0 ** -6 - q.zero_point) * q.scale, q.value)
    assert q.fmt == IntFormat(8) and (q.bit_width, q.signed, q.narrow_range) == (8, True, True)


def test_uint8_codes():
    x = torch.rand(50)
    q, spec = _quant(Uint8ActPerTensor, x, (-1, -1))
    assert q.int().dtype == torch.uint8 and q.int().max().item() == 255 and not q.signed
    assert q.fmt is spec.fmt and not q.narrow_range and not bool(q.signed_t)
    assert torch.equal(q.int().float() * q.int_scale, q.value)


def test_per_tensor_scale_is_0d():
    spec = quantizer_spec(Int8WeightPerTensor)
    q = quant_tensor_from_output(Int8WeightPerTensor.tensor_quant(torch.randn(4, 4)), spec)
    assert q.scale.shape == () and q.int_scale.shape == () and q.codes().shape == (4, 4)
    assert q.fmt is spec.fmt


@pytest.mark.parametrize("fmt", [IntFormat(8), IntFormat(4, frac_bits=0), IntFormat(6, frac_bits=3),
                                 IntFormat(8, narrow_range=False, frac_bits=0)])
def test_fixed_point_codes_from_a_given_scale(fmt):
    """``value = int * 2**-frac_bits * scale``, whatever the fixed point."""
    ints = torch.arange(fmt.qmin, fmt.qmax + 1, dtype=torch.float32)
    scale = torch.tensor(0.375)
    value = ints * 2.0 ** -fmt.frac_bits * scale
    spec = QuantSpec("test", fmt, granularity="tensor", restrict="fp")
    q = quant_tensor_from_output(FakeQuantResult(value, scale), spec)
    assert isinstance(q, IntQuantTensor) and q.fmt is fmt and q.scale is scale
    assert torch.equal(q.int().float(), ints) and torch.equal(q.int_scale, scale * 2.0 ** -fmt.frac_bits)
    assert q.narrow_range == fmt.narrow_range and q.bit_width == fmt.bit_width


def test_width_attributes_are_read_only():
    q, _ = _quant(Int8WeightPerChannel, torch.randn(3, 4))
    for attribute in ("bit_width", "signed", "narrow_range", "signed_t", "training_t"):
        with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
            setattr(q, attribute, None)
    assert q.nan_values is None and q.inf_values is None
