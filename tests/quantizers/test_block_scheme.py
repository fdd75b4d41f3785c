"""Scheme mixins: a quantizer built from a block scheme's record computes fake_quant(x, scheme)."""
from __future__ import annotations

import pytest
import torch

import groupquant as gq
from groupquant.formats import get_scheme, known_schemes
from groupquant.inject import ConfigError
from groupquant.quantizers import FloatQuantizer, IntQuantizer, NVFP4Scaling, NVFP4Weight, WeightQuantizer
from groupquant.quantizers.block_scheme import scheme_mixin, scheme_settings
from groupquant.quantizers.resolve import quantizer_spec


def _quantizer(name: str) -> type:
    kind = FloatQuantizer if get_scheme(name).element.is_float else IntQuantizer
    mixin = scheme_mixin(name, f"Scheme_{name}", __name__, "test")
    return type(mixin)(f"Q_{name}", (mixin, WeightQuantizer, kind), {"__module__": __name__})


@pytest.mark.parametrize("name", known_schemes())
def test_a_quantizer_from_a_scheme_equals_fake_quant_of_the_scheme(name):
    torch.manual_seed(0)
    x = torch.randn(8, 64) * torch.logspace(-3, 3, 64)
    q = _quantizer(name)
    spec = quantizer_spec(q)
    scheme = get_scheme(name)
    assert spec.fmt == scheme.element and spec.group_size == scheme.block_size
    y = q.tensor_quant(x)  # a quant tensor: its value is the dequantized tensor, grouped
    assert torch.equal(y.value.reshape(x.shape), gq.fake_quant(x, name))


def test_nvfp4_settings_come_from_the_scheme_record():
    scheme = get_scheme("nvfp4")
    settings = scheme_settings("nvfp4")
    assert settings["group_size"] == scheme.block_size and settings["scale_format"] == scheme.scale_format.name
    assert settings["tensor_scale"] is scheme.tensor_scale
    assert all(getattr(NVFP4Scaling, k) == v for k, v in settings.items())
    with pytest.raises(ConfigError, match="group_size"):
        quantizer_spec(NVFP4Weight.let(group_size=32))
    other_blocks = NVFP4Weight.let(block_scheme=None, group_size=32)  # what the error message suggests
    assert quantizer_spec(other_blocks).group_size == 32


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError, match="unknown block scheme 'nvfp5'"):
        scheme_settings("nvfp5")
