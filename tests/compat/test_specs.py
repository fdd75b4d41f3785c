"""MxSpecs keys and defaults, the unknown-key error, finalize / backwards specs, argparse round trip."""
from __future__ import annotations

import argparse

import pytest

from groupquant.compat.microxcaling import (MxSpecs, UnknownMxSpecError, add_mx_args, finalize_mx_specs,
                                            get_backwards_mx_specs, get_mx_specs)

# microxcaling's settings table (mx/specs.py), written out by hand as the facts to match
MICROXCALING_DEFAULTS = {
    "scale_bits": 0, "w_elem_format": None, "a_elem_format": None, "w_elem_format_bp": None,
    "a_elem_format_bp": None, "a_elem_format_bp_ex": None, "a_elem_format_bp_os": None,
    "mx_flush_fp32_subnorms": False, "shared_exp_method": "max", "block_size": 0, "bfloat": 0, "fp": 0,
    "bfloat_subnorms": True, "quantize_backprop": True, "round": "nearest", "round_m": "nearest",
    "round_weight": "nearest", "round_output": "nearest", "round_grad_weight": "nearest",
    "round_grad_input": "nearest", "round_mx_output": "nearest", "round_mx_input_grad_input": "nearest",
    "round_mx_weight_grad_input": "nearest", "round_mx_grad_output_grad_input": "nearest",
    "round_mx_input_grad_weight": "nearest", "round_mx_grad_output_grad_weight": "nearest",
    "softmax_exp2": False, "vec_use_exp2": False, "vec_use_recip": False, "custom_cuda": False,
}


def test_keys_and_defaults_match_microxcaling_plus_one_option():
    specs = MxSpecs()
    assert isinstance(specs, dict)
    extra = {k: v for k, v in specs.items() if k not in MICROXCALING_DEFAULTS}
    assert extra == {"shared_exp_from_float_log2": False}
    assert {k: specs[k] for k in MICROXCALING_DEFAULTS} == MICROXCALING_DEFAULTS
    assert set(specs.help_strings) == set(specs)


@pytest.mark.parametrize("make", [lambda: MxSpecs(blok_size=32), lambda: MxSpecs({"w_elem_fromat": "int8"}),
                                  lambda: MxSpecs().__setitem__("rounding", "even"),
                                  lambda: MxSpecs().update(bfloat16=1)])
def test_unknown_key_is_a_key_error_with_did_you_mean(make):
    with pytest.raises(KeyError) as info:
        make()
    assert isinstance(info.value, UnknownMxSpecError)
    assert "unknown mx_specs key" in str(info.value)
    if "blok" in str(info.value):
        assert "did you mean 'block_size'" in str(info.value)


def test_copy_stays_mxspecs():
    s = MxSpecs(block_size=32)
    c = s.copy()
    assert type(c) is MxSpecs and c == s and c is not s


def test_finalize_early_exit_and_dependent_keys():
    assert finalize_mx_specs({"block_size": 32}) is None
    assert finalize_mx_specs({"block_size": 32}, early_exit=False)["block_size"] == 32
    s = finalize_mx_specs({"a_elem_format": "fp8_e4m3", "a_elem_format_bp_os": "fp8_e5m2", "round": "floor",
                           "round_grad_input": "even"})
    assert isinstance(s, MxSpecs)
    assert s["a_elem_format_bp"] == s["a_elem_format_bp_ex"] == "fp8_e4m3"
    assert s["a_elem_format_bp_os"] == "fp8_e5m2"          # given: kept
    assert s["w_elem_format_bp"] is None                   # w_elem_format unset
    assert s["round_output"] == s["round_weight"] == s["round_mx_output"] == "floor"
    assert s["round_mx_weight_grad_input"] == s["round_mx_grad_output_grad_weight"] == "even"


def test_backwards_specs():
    s = finalize_mx_specs({"w_elem_format": "int8", "a_elem_format": "int8", "block_size": 32, "bfloat": 16})
    assert get_backwards_mx_specs(s) == s
    s["quantize_backprop"] = False
    b = get_backwards_mx_specs(s)
    assert all(b[k] is None for k in ("w_elem_format", "a_elem_format", "w_elem_format_bp", "a_elem_format_bp",
                                      "a_elem_format_bp_ex", "a_elem_format_bp_os"))
    assert (b["block_size"], b["bfloat"], b["fp"]) == (0, 0, 0)
    assert s["w_elem_format"] == "int8"  # the original is untouched


def test_argparse_round_trip():
    parser = add_mx_args(argparse.ArgumentParser())
    assert get_mx_specs(parser.parse_args([])) is None
    assert get_mx_specs(parser.parse_args(["--skip_early_exit"])) == MxSpecs()
    args = parser.parse_args(["--w_elem_format", "fp4_e2m1", "--a_elem_format", "fp8_e4m3", "--block_size", "32",
                              "--bfloat", "16", "--round", "even", "--no_quantize_backprop", "--vec_use_recip",
                              "--shared_exp_from_float_log2"])
    s = get_mx_specs(args)
    assert s["w_elem_format_bp"] == "fp4_e2m1" and s["a_elem_format_bp_os"] == "fp8_e4m3"
    assert (s["block_size"], s["bfloat"], s["round_output"]) == (32, 16, "even")
    assert s["quantize_backprop"] is False and s["vec_use_recip"] is True and s["shared_exp_from_float_log2"] is True
    assert s["custom_cuda"] is False
