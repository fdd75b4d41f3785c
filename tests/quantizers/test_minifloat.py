"""The Brevitas-named minifloat quantizers: widths from mixins, OCP / FNUZ special values, per-tensor
and per-channel float scales (against ml_dtypes casts), and non-saturating variants."""
import ml_dtypes
import numpy as np
import pytest
import torch

import groupquant as gq
from groupquant.formats import SpecialValues
from groupquant.inject import ConfigError
from groupquant.nn import QuantLinear
from groupquant.quantizers import (Fp4e2m1Mixin, Fp6e2m3Mixin, Fp8e4m3FNUZWeightPerTensorFloat,
                                   Fp8e4m3OCPWeightPerChannelFloat, Fp8e4m3OCPWeightPerTensorFloat,
                                   Fp8e5m2FNUZWeightPerChannelFloat, Fp8e5m2OCPActPerTensorFloat,
                                   FpOCPWeightPerTensorFloat, MXFloat8e4m3Weight, MXFloat8e5m2Weight,
                                   quantizer_spec)

ORACLE = {(4, SpecialValues.NAN_ONLY): ml_dtypes.float8_e4m3fn, (5, SpecialValues.IEEE): ml_dtypes.float8_e5m2,
          (4, SpecialValues.FNUZ): ml_dtypes.float8_e4m3fnuz, (5, SpecialValues.FNUZ): ml_dtypes.float8_e5m2fnuz}


def _weight():
    g = torch.Generator().manual_seed(11)
    return torch.randn(12, 70, generator=g) * torch.logspace(-4, 4, 70)


def _oracle(w: np.ndarray, scale: np.ndarray, fmt) -> np.ndarray:
    """``cast(clamp(w / scale)) * scale`` with ml_dtypes, in float32 (the scale is float32)."""
    kind = ORACLE[(fmt.exponent_bit_width, fmt.special_values)]
    y = np.clip(w / scale, -fmt.max_normal, fmt.max_normal).astype(np.float32)
    return y.astype(kind).astype(np.float32) * scale


@pytest.mark.parametrize("quant, per_channel", [(Fp8e4m3OCPWeightPerTensorFloat, False),
                                                (Fp8e4m3FNUZWeightPerTensorFloat, False),
                                                (Fp8e4m3OCPWeightPerChannelFloat, True),
                                                (Fp8e5m2FNUZWeightPerChannelFloat, True)])
def test_float_scaled_weights_against_ml_dtypes(quant, per_channel):
    w = _weight()
    layer = QuantLinear(70, 12, bias=False, weight_quant=quant)
    layer.weight.data.copy_(w)
    qt = layer.quant_weight()
    fmt = qt.fmt
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax()
    scale = (amax / fmt.max_normal).float()
    assert torch.equal(qt.scale, scale)
    expected = _oracle(w.numpy(), scale.numpy(), fmt)
    assert np.array_equal(qt.value.detach().numpy(), expected)


def test_fnuz_and_ocp_constants_follow_the_widths():
    fnuz = quantizer_spec(Fp8e4m3FNUZWeightPerTensorFloat).fmt
    assert (fnuz.bias, fnuz.max_normal, fnuz.special_values) == (8, 240.0, SpecialValues.FNUZ)
    e5 = quantizer_spec(Fp8e5m2OCPActPerTensorFloat).fmt
    assert (e5.bias, e5.max_normal, e5.special_values) == (15, 57344.0, SpecialValues.IEEE)


@pytest.mark.parametrize("mixin, name", [(Fp6e2m3Mixin, "fp6_e2m3"), (Fp4e2m1Mixin, "fp4_e2m1")])
def test_a_width_mixin_sets_the_format_of_a_generic_quantizer(mixin, name):
    quant = type("Q", (mixin, FpOCPWeightPerTensorFloat), {})
    assert quantizer_spec(quant).fmt == gq.get_format(name)
    assert quantizer_spec(FpOCPWeightPerTensorFloat).fmt == gq.get_format("fp8_e4m3")


@pytest.mark.parametrize("quant, fmt_name, overflow", [(MXFloat8e4m3Weight, "fp8_e4m3", float("nan")),
                                                       (MXFloat8e5m2Weight, "fp8_e5m2", float("inf"))])
def test_non_saturating_mx_quantizers_overflow_by_the_format_rule(quant, fmt_name, overflow):
    w = _weight()
    w[3, :32] = torch.linspace(-1.0, 1.0, 32)
    w[3, 7] = 1.97  # floor rule: scale 2**(0 - emax); 1.97 / scale rounds past max normal
    layer = QuantLinear(70, 12, bias=False, weight_quant=quant.let(saturating=False))
    layer.weight.data.copy_(w)
    qt = layer.quant_weight()
    expected = gq.fake_quant(w, fmt_name, 32, 1, saturating=False)
    assert torch.equal(qt.value.nan_to_num(7.0, 8.0, -8.0), expected.nan_to_num(7.0, 8.0, -8.0))
    got = qt.value[3, 7].item()
    assert (np.isnan(got) if np.isnan(overflow) else got == overflow)
    saturated = QuantLinear(70, 12, bias=False, weight_quant=quant)
    saturated.weight.data.copy_(w)
    assert saturated.quant_weight().value[3, 7].item() == gq.get_format(fmt_name).max_normal * 2.0 ** -gq.get_format(fmt_name).emax
    assert qt.saturating is False and qt.codes()[3, 7].item() == gq.quantize(w, fmt_name, 32, 1, saturating=False).codes.reshape(12, -1)[3, 7].item()


def test_non_saturating_needs_inf_or_nan_codes_even_from_a_layer_keyword():
    with pytest.raises(ConfigError) as info:
        QuantLinear(70, 12, weight_quant=type("Q", (Fp4e2m1Mixin, FpOCPWeightPerTensorFloat), {}),
                    weight_saturating=False)
    assert info.value.setting == "weight_saturating"
