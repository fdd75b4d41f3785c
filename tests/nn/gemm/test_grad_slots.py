"""One table of backward slots: the layer and matmul slots, their dims, the recipe fields, the
GEMM-only keywords and the functional-mode mapping all come from ``GRAD_ROLES``; one autograd
function runs the quantized and the memory-lean backward of linear and conv layers."""
import dataclasses

import torch

from groupquant.nn import DISABLED, SAME, QuantConv2d, QuantLinear, QuantMatMul, recipe
from groupquant.nn.gemm.backward_gemm import BackwardOperands
from groupquant.nn.gemm.grad_slots import (GEMM_ONLY_KEYWORDS, GRAD_ROLES, GRAD_SLOTS, LINEAR_GRAD_SLOTS,
                                      MATMUL_GRAD_SLOTS, matmul_slots)
from groupquant.nn.recipes import Recipe
from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight, MXFloat8e5m2Act


def test_every_role_has_one_slot_per_gemm_kind_and_a_backward_operand():
    roles = [f.name for f in dataclasses.fields(BackwardOperands)]
    assert [r.role for r in GRAD_ROLES] == roles
    assert [s.role for s in LINEAR_GRAD_SLOTS] == roles == [s.role for s in MATMUL_GRAD_SLOTS]


def test_layers_build_a_proxy_for_every_table_slot_with_the_table_dims():
    layer = QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                        grad_output_quant=MXFloat8e5m2Act)
    matmul = QuantMatMul(a_quant=MXFloat8e4m3Act, b_quant=MXFloat8e4m3Act, grad_output_quant=MXFloat8e5m2Act)
    for module, table in ((layer, LINEAR_GRAD_SLOTS), (matmul, MATMUL_GRAD_SLOTS)):
        for slot in table:
            spec = getattr(module, slot.name).spec
            assert (spec.group_dim, spec.channel_dim) == slot.dims


def test_recipe_fields_cover_the_table_and_its_prefixes_route_keywords():
    fields = {f.name for f in dataclasses.fields(Recipe)}
    assert set(GRAD_SLOTS) <= fields
    for name, (prefix, _default) in GRAD_SLOTS.items():
        assert name in GEMM_ONLY_KEYWORDS and prefix in GEMM_ONLY_KEYWORDS
        layer = QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act,
                            grad_output_quant=MXFloat8e5m2Act, **{prefix + "group_size": 16})
        assert getattr(layer, name).spec.group_size == 16


def test_matmul_slots_take_the_activation_slots_of_a_recipe():
    r = recipe("mxfp4_fwd_mxfp8_bwd")
    got = matmul_slots({name: getattr(r, name) for name in GRAD_SLOTS})
    assert got == {"grad_output_quant": r.grad_output_quant, "b_quant_for_grad_a": r.input_quant_for_grad_weight,
                   "a_quant_for_grad_b": r.input_quant_for_grad_weight}
    same = matmul_slots({"grad_output_quant": MXFloat8e5m2Act, "input_quant_for_grad_weight": SAME,
                         "grad_output_quant_for_grad_weight": DISABLED})
    assert same == {"grad_output_quant": MXFloat8e5m2Act, "grad_output_quant_for_grad_b": DISABLED}


def test_one_autograd_function_for_linear_and_conv_lean_and_quantized():
    kinds = set()
    for backward in ({}, {"grad_output_quant": MXFloat8e5m2Act}):
        for layer, x in ((QuantLinear(64, 32, weight_quant=MXFloat8e4m3Weight, **backward), torch.randn(4, 64)),
                         (QuantConv2d(32, 8, 3, weight_quant=MXFloat8e4m3Weight, **backward),
                          torch.randn(2, 32, 5, 5))):
            y = layer(x.requires_grad_(True))
            kinds.add(type(y.grad_fn).__name__)
            y.sum().backward()
            assert x.grad is not None and layer.weight.grad is not None
    assert kinds == {"_QuantGemmBackward"}
