"""recipe_from_mx_specs: mx_specs onto groupquant's GEMM slots; QuantLinear then equals compat linear."""
from __future__ import annotations

import pytest
import torch

from groupquant.compat.microxcaling import finalize_mx_specs, linear, recipe_from_mx_specs
from groupquant.nn import DISABLED, QuantLinear

FORMATS = dict(w_elem_format="fp8_e4m3", a_elem_format="fp6_e3m2", w_elem_format_bp="fp4_e2m1",
               a_elem_format_bp="int8", a_elem_format_bp_ex="fp6_e2m3", a_elem_format_bp_os="fp8_e5m2",
               block_size=32, round="even")


def test_slots_follow_the_per_gemm_formats():
    r = recipe_from_mx_specs(finalize_mx_specs(dict(FORMATS)))
    names = {slot: getattr(r, slot).__name__ for slot in ("weight_quant", "input_quant", "weight_quant_for_grad_input",
                                                          "grad_output_quant", "grad_output_quant_for_grad_weight",
                                                          "input_quant_for_grad_weight")}
    assert names == {"weight_quant": "MXFloat8e4m3Weight[group_size=32, float_to_int_rounding=even]",
                     "input_quant": "MXFloat6e3m2Act[group_size=32, float_to_int_rounding=even]",
                     "weight_quant_for_grad_input": "MXFloat4e2m1Weight[group_size=32, float_to_int_rounding=even]",
                     "grad_output_quant": "MXFloat8e5m2Act[group_size=32, float_to_int_rounding=even]",
                     "grad_output_quant_for_grad_weight": "MXFloat6e2m3Act[group_size=32, float_to_int_rounding=even]",
                     "input_quant_for_grad_weight": "MXInt8Act[group_size=32, float_to_int_rounding=even]"}


def test_quant_linear_with_the_recipe_equals_compat_linear():
    specs = finalize_mx_specs(dict(FORMATS))
    torch.manual_seed(0)
    layer = QuantLinear(64, 48, bias=False, **recipe_from_mx_specs(specs).layer_kwargs())
    x = torch.randn(32, 64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()
    g = torch.randn(32, 48)
    y_native, y_compat = layer(x), linear(x2, w, mx_specs=specs)
    y_native.backward(g), y_compat.backward(g)
    assert torch.equal(y_native, y_compat)
    assert torch.equal(x.grad, x2.grad) and torch.equal(layer.weight.grad, w.grad)


def test_unset_backward_formats_are_disabled_and_errors_name_the_setting():
    r = recipe_from_mx_specs(finalize_mx_specs({"w_elem_format": "fp4_e2m1", "block_size": 32}))
    assert r.input_quant is None and r.grad_output_quant is DISABLED and r.input_quant_for_grad_weight is DISABLED
    with pytest.raises(ValueError, match="block_size"):
        recipe_from_mx_specs({"w_elem_format": "int8"})
    with pytest.raises(ValueError, match="w_elem_format='int4'"):
        recipe_from_mx_specs({"w_elem_format": "int4", "block_size": 32})
