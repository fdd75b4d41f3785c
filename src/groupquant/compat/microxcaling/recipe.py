"""``mx_specs`` as a groupquant recipe: the one route of the compat GEMM layers (:mod:`.gemm`) and of a
migrated program (``quantize_model(model, recipe=recipe_from_mx_specs(specs))``). Which slot each key sets,
and what a recipe leaves out: ``docs/compat-microxcaling.md``.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Dict, Mapping, Optional, Tuple

from ...formats import IntFormat
from ...nn import DISABLED, GemmRounding, Recipe
from ...quantizers import MX_QUANTIZERS
from ...quantizers.settings import FloatToIntRounding
from .mapping import elem_format, element_precision, group_size, mx_rounding, scale_format
from .specs import ELEM_FORMAT_KEYS, MxSpecs, apply_mx_specs, get_backwards_mx_specs

__all__ = ["recipe_from_mx_specs"]

#: (slot, format key, MX round key, weight or act quantizer) of microxcaling's Linear
_SLOTS = (
    ("weight_quant", "w_elem_format", "round_mx_output", "weight"),
    ("input_quant", "a_elem_format", "round_mx_output", "act"),
    ("weight_quant_for_grad_input", "w_elem_format_bp", "round_mx_weight_grad_input", "weight"),
    ("grad_output_quant", "a_elem_format_bp_os", "round_mx_grad_output_grad_input", "act"),
    ("grad_output_quant_for_grad_weight", "a_elem_format_bp_ex", "round_mx_grad_output_grad_weight", "act"),
    ("input_quant_for_grad_weight", "a_elem_format_bp", "round_mx_input_grad_weight", "act"),
)
#: microxcaling's convolution: the forward formats in every GEMM, MX rounding always nearest (no round key)
_CONV_SLOTS = tuple((slot, kind[0] + "_elem_format", None, kind) for slot, _, _, kind in _SLOTS)
#: microxcaling's ``block_size=0`` (the whole axis shares one exponent) as a group size: a group at
#: least as long as its dim is the whole dim (:func:`groupquant.ops.group_layout.normalize_block_size`)
WHOLE_AXIS = 2 ** 62
_OUTSIDE_GEMMS = ("rounds the GEMM layers' operands, outputs and gradients (the recipe's gemm_rounding), but not "
                  "the element-wise ops outside them (norms, activations, softmax, residual adds), which "
                  "microxcaling's injected ops round too: use the compat ops there")
#: what :func:`recipe_from_mx_specs` warns about, by setting (when set)
_LEFT_OUT = {
    "shared_exp_from_float_log2": "is the quantizers' scale rule float_log2, which runs on the PyTorch reference "
                                  "(no native kernel)",
    "mx_flush_fp32_subnorms": "is not carried by the recipe: blocks whose max is a float32 subnormal are "
                              "quantized, not zeroed",
    "bfloat": _OUTSIDE_GEMMS,
    "fp": _OUTSIDE_GEMMS,
}


def _quantizer(specs: Mapping[str, Any], fmt_key: str, round_key: Optional[str], kind: str) -> Optional[type]:
    """The MX quantizer class of one slot (``round_key`` None: nearest), or None for an unset format."""
    fmt = elem_format(specs[fmt_key], fmt_key)
    if fmt is None:
        return None
    pair, settings = _mx_pair(fmt, fmt_key, specs[fmt_key])
    settings.update({"group_size": group_size(specs) or WHOLE_AXIS,
                      "float_to_int_rounding": FloatToIntRounding(
                          "nearest" if round_key is None else mx_rounding(specs[round_key], round_key))})
    if specs["shared_exp_from_float_log2"]:  # microxcaling's exponent (else OCP's exact floor)
        settings["scale_rounding"] = "float_log2"
    sf = scale_format(specs["scale_bits"], specs["mx_flush_fp32_subnorms"], bool(specs["shared_exp_from_float_log2"]))
    if sf is not None:
        settings["scale_format"] = sf
    return (pair.weight if kind == "weight" else pair.act).let(**settings)


def _mx_pair(fmt: Any, fmt_key: str, given: Any) -> Tuple[Any, dict]:
    """The MX quantizer pair of ``fmt`` and its settings (microxcaling's intN: MXINT8 with ``bit_width=N``)."""
    if fmt.name in MX_QUANTIZERS:
        return MX_QUANTIZERS[fmt.name], {}
    if isinstance(fmt, IntFormat) and fmt.signed and fmt.narrow_range:
        return MX_QUANTIZERS["int8"], {"bit_width": fmt.bit_width}
    raise ValueError(f"mx_specs {fmt_key}={given!r} has no groupquant MX quantizer "
                     f"(those with one: {', '.join(MX_QUANTIZERS)}, int4, int2)")


def gemm_rounding(specs: Mapping[str, Any], bias_add: str = "rounded") -> Optional[GemmRounding]:
    """The ``bfloat`` / ``fp`` roundings around a GEMM with their ``round_*`` modes, or None (``bias_add``:
    ``"rounded"`` for linear and matmul, ``"inside"`` for a convolution)."""
    back = get_backwards_mx_specs(specs)

    def p(source: Mapping[str, Any], key: str) -> Any:
        return element_precision(source, source[key], setting=key)

    rounding = GemmRounding(input=p(specs, "round_output"), weight=p(specs, "round_weight"),
                            bias=p(specs, "round_weight"), output=p(specs, "round_output"),
                            grad_output=p(back, "round_grad_input"), grad_input=p(back, "round_grad_input"),
                            grad_weight=p(back, "round_grad_weight"), grad_bias=p(back, "round_grad_weight"),
                            bias_add=bias_add, backward_operands="rounded" if specs["quantize_backprop"] else "given")
    return None if rounding.input is None else rounding


def recipe_from_mx_specs(mx_specs: Mapping[str, Any], name: str = "mx_specs") -> Recipe:
    """A :class:`groupquant.nn.Recipe` with the MX settings of ``mx_specs``; ValueError naming the setting
    for ``block_size=0`` or a format that is not OCP MX, a UserWarning naming each setting it leaves out."""
    specs = apply_mx_specs(mx_specs)
    if group_size(specs) == 0:
        raise ValueError(f"mx_specs block_size={specs['block_size']!r}: a recipe needs a block size > 0")
    scale_format(specs["scale_bits"])  # ValueError naming scale_bits
    for key in ELEM_FORMAT_KEYS:  # OCP MX element formats only: microxcaling's int4 / int2 run in the compat layers
        fmt = elem_format(specs[key], key)
        if fmt is not None and fmt.name not in MX_QUANTIZERS:
            raise ValueError(f"mx_specs {key}={specs[key]!r} is not an OCP MX element format (those: "
                             f"{', '.join(MX_QUANTIZERS)}); the compat layers take it")
    for key, consequence in _LEFT_OUT.items():
        if specs[key]:
            warnings.warn(f"recipe_from_mx_specs: mx_specs {key}={specs[key]!r} {consequence}", UserWarning,
                          stacklevel=2)
    # the flush is the compat layers' (their scale format); a model recipe keeps OCP's subnormal blocks
    return _recipe(MxSpecs(specs, mx_flush_fp32_subnorms=False), name)


def _backward_disabled(specs: Mapping[str, Any], slots: Dict[str, Any], forward: Tuple[str, ...]) -> Dict[str, Any]:
    """``slots`` with a backward slot DISABLED when its format is unset or without ``quantize_backprop``."""
    backprop = bool(specs["quantize_backprop"])
    return {slot: DISABLED if slot not in forward and (quant is None or not backprop) else quant
            for slot, quant in slots.items()}


def _recipe(specs: Mapping[str, Any], name: str, gemm: str = "linear") -> Recipe:
    """The recipe of checked ``specs`` (no warnings) for microxcaling's ``"linear"`` or ``"conv"``."""
    table = _SLOTS if gemm == "linear" else _CONV_SLOTS
    slots = {slot: _quantizer(specs, fmt_key, round_key, kind) for slot, fmt_key, round_key, kind in table}
    rounding = gemm_rounding(specs, "rounded" if gemm == "linear" else "inside")
    return Recipe(name, quantize_backprop=True, gemm_rounding=rounding,
                  grad_weight_groups="sequence" if gemm == "linear" else "tokens",
                  **_backward_disabled(specs, slots, ("weight_quant", "input_quant")))


def matmul_settings(specs: Mapping[str, Any], mode: str) -> Dict[str, Any]:
    """The :class:`groupquant.nn.QuantMatMul` keywords of microxcaling's ``matmul`` with ``mode_config`` ``mode``."""
    a, b = (side + "_elem_format" for side in mode)
    table = (("a_quant", a, "round_mx_output"), ("b_quant", b, "round_mx_output"),
             ("grad_output_quant", "a_elem_format_bp_os", "round_mx_grad_output_grad_input"),
             ("grad_output_quant_for_grad_b", "a_elem_format_bp_os", "round_mx_grad_output_grad_input"),
             ("b_quant_for_grad_a", b + "_bp", "round_mx_input_grad_input"),
             ("a_quant_for_grad_b", a + "_bp", "round_mx_input_grad_input"))
    slots = {slot: _quantizer(specs, fmt_key, round_key, "act") for slot, fmt_key, round_key in table}
    out: Dict[str, Any] = dict(_backward_disabled(specs, slots, ("a_quant", "b_quant")), quantize_backprop=True)
    rounding = gemm_rounding(specs)
    if rounding is not None:
        back = get_backwards_mx_specs(specs)
        grad = element_precision(back, back["round_grad_input"], setting="round_grad_input")
        out["gemm_rounding"] = dataclasses.replace(rounding, weight=rounding.input, grad_weight=grad)
    return out
