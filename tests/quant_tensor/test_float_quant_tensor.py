import dataclasses

import numpy as np
import pytest
import torch

from groupquant.core import QuantSpec, build_tensor_quant
from groupquant.formats import FloatFormat, SpecialValues, get_format
from groupquant.ops import FakeQuantResult
from groupquant.quant_tensor import FloatQuantTensor, quant_tensor_from_output
from groupquant.quantizers import Fp8e4m3WeightPerTensor, quantizer_spec

ml_dtypes = pytest.importorskip("ml_dtypes")


def test_fp8_codes_are_the_ml_dtypes_bits():
    w = torch.randn(10, 20) * 7
    spec = quantizer_spec(Fp8e4m3WeightPerTensor).with_dims(1, 0)
    q = quant_tensor_from_output(build_tensor_quant(spec)(w), spec)
    assert isinstance(q, FloatQuantTensor) and q.bit_width == 8
    assert q.fmt is spec.fmt and q.saturating and not q.training
    assert q.nan_inf_rule is SpecialValues.NAN_ONLY and q.fmt == FloatFormat(4, 3)
    assert q.scale.shape == () and q.scale.item() == pytest.approx(w.abs().max().item() / 448)
    elements = (w / q.scale).clamp(-448, 448).numpy().astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(q.codes().numpy(), elements.view(np.uint8))
    np.testing.assert_array_equal(q.minifloat().numpy(), elements.astype(np.float32))
    assert torch.equal(q.minifloat() * q.scale, q.value)


def test_standalone_tensor_quant_gives_the_same_tensor():
    w = torch.randn(10, 20) * 7
    spec = quantizer_spec(Fp8e4m3WeightPerTensor)
    q = quant_tensor_from_output(Fp8e4m3WeightPerTensor.tensor_quant(w), spec, training=True)
    ref = quant_tensor_from_output(build_tensor_quant(spec.with_dims(1, 0))(w), spec.with_dims(1, 0))
    assert torch.equal(q.value, ref.value) and torch.equal(q.scale, ref.scale) and torch.equal(q.codes(), ref.codes())
    assert q.training and bool(q.training_t) and not bool(ref.training_t)


@pytest.mark.parametrize("name, exp, man, bias, rule, nan_values, inf_values", [
    ("fp8_e4m3", 4, 3, 7, SpecialValues.NAN_ONLY, ("111",), None),
    ("fp8_e5m2", 5, 2, 15, SpecialValues.IEEE, ("01", "10", "11"), ("00",)),
    ("fp6_e3m2", 3, 2, 3, SpecialValues.NONE, None, None),
    ("fp6_e2m3", 2, 3, 1, SpecialValues.NONE, None, None),
    ("fp4_e2m1", 2, 1, 1, SpecialValues.NONE, None, None),
])
def test_brevitas_attributes_read_off_the_format(name, exp, man, bias, rule, nan_values, inf_values):
    fmt = get_format(name)
    spec = QuantSpec("test", fmt, granularity="tensor", restrict="fp")
    q = quant_tensor_from_output(build_tensor_quant(spec)(torch.randn(4, 8)), spec)
    assert isinstance(q, FloatQuantTensor) and q.fmt is fmt
    assert (q.bit_width, q.exponent_bit_width, q.mantissa_bit_width, q.exponent_bias) == (1 + exp + man, exp, man, bias)
    assert q.nan_inf_rule is rule and q.nan_values == nan_values and q.inf_values == inf_values
    assert q.signed and q.is_signed and bool(q.signed_t) and q.signed_t.dtype == torch.bool
    assert not q.narrow_range
    # read-only: derived from fmt, never stored beside it
    for attribute in ("bit_width", "exponent_bit_width", "mantissa_bit_width", "exponent_bias", "nan_values",
                      "inf_values", "nan_inf_rule", "signed"):
        with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
            setattr(q, attribute, None)


def test_the_spec_decides_saturating_and_the_format():
    spec = QuantSpec("test", get_format("fp8_e5m2"), granularity="tensor", restrict="fp", saturating=False)
    out = FakeQuantResult(torch.tensor([1.0, -2.0, float("inf")]), torch.tensor(0.5))
    q = quant_tensor_from_output(out, spec, training=True)
    assert isinstance(q, FloatQuantTensor) and q.saturating is False and q.training and q.fmt is spec.fmt
    assert q.scale is out.scale and q.value is out.value  # as the op produced them
    assert torch.equal(q.zero_point, torch.zeros(())) and not q.zero_point.requires_grad
    assert q.minifloat().tolist() == [2.0, -4.0, float("inf")]
    assert q.codes().tolist() == [0x40, 0xC4, 0x7C]  # e5m2: 2.0, -4.0, +Inf
