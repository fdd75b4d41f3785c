import json
import math

from groupquant.demo.pipeline import DemoOptions, DemoReport, FormatResult, RecipeResult
from groupquant.demo.report import format_report, report_to_dict, report_to_json
from groupquant.demo.training import Evaluation


def _report() -> DemoReport:
    r = DemoReport(options=DemoOptions(formats=("fp4_e2m1", "int8")), train_size=10, test_size=5,
                   num_parameters=7, float_test=Evaluation(0.9, 0.25), float_bytes=28,
                   float_loss_curve=[1.0, 0.5])
    r.ptq = [FormatResult("fp4_e2m1", 4.25, 19.04, Evaluation(0.8, 0.5), 11),
             FormatResult("int8", 8.25, math.inf, Evaluation(0.9, 0.25), 13)]
    r.qat_format, r.qat_before, r.qat_after = "fp4_e2m1", Evaluation(0.8, 0.5), Evaluation(0.875, 0.3)
    return r


def test_text_report_shows_every_row_and_the_qat_change():
    text = format_report(_report())
    assert "fp4_e2m1        4.25     19.0 dB    80.0%" in text
    assert "int8            8.25         inf    90.0%" in text
    assert "80.0% -> 87.5%" in text and "0.5000 -> 0.3000" in text


def test_json_report_is_plain_data():
    data = json.loads(report_to_json(_report()))
    assert data["ptq"][0] == {"fmt": "fp4_e2m1", "bits_per_element": 4.25, "weight_sqnr_db": 19.04,
                              "test": {"accuracy": 0.8, "loss": 0.5}, "packed_bytes": 11}
    assert data["ptq"][1]["weight_sqnr_db"] is None  # infinite SQNR (exact) is not valid JSON
    assert data["options"]["formats"] == ["fp4_e2m1", "int8"]
    assert data["qat_after"] == {"accuracy": 0.875, "loss": 0.3}
    assert report_to_dict(_report())["float_loss_curve"] == [1.0, 0.5]


_FP4_FWD_FP8_BWD = {"input_quant": "MXFloat4e2m1Act", "weight_quant": "MXFloat4e2m1Weight",
                    "grad_output_quant": "MXFloat8e4m3Act", "weight_quant_for_grad_input": "MXFloat8e4m3Weight",
                    "grad_output_quant_for_grad_weight": "MXFloat8e4m3Act",
                    "input_quant_for_grad_weight": "MXFloat8e4m3Act"}


def _recipe_report(sqnr: float = 13.14, operands=None, backward: bool = True) -> DemoReport:
    r = DemoReport(options=DemoOptions(formats=(), qat_epochs=0, recipe="mxfp4_fwd_mxfp8_bwd"), train_size=10,
                   test_size=5, num_parameters=7, float_test=Evaluation(0.9, 0.25), float_bytes=28,
                   float_loss_curve=[1.0, 0.5])
    r.recipe = RecipeResult("mxfp4_fwd_mxfp8_bwd", dict(operands or _FP4_FWD_FP8_BWD), 3, backward, sqnr,
                            Evaluation(0.875, 0.3), [1.1, 0.625])
    return r


def test_text_report_of_a_recipe_names_each_operand_and_compares_with_float():
    lines = format_report(_recipe_report()).splitlines()
    assert "post-training" not in "\n".join(lines) and "QAT" not in "\n".join(lines)
    gemms = [line.split() for line in lines if line.startswith(("  forward", "  backward"))]
    assert gemms == [
        ["forward", "y", "=", "x", "W^T", "x:", "MXFloat4e2m1Act", "W:", "MXFloat4e2m1Weight", "(along", "inputs)"],
        ["backward", "dX", "=", "dY", "W", "dY:", "MXFloat8e4m3Act", "W:", "MXFloat8e4m3Weight", "(along", "outputs)"],
        ["backward", "dW", "=", "dY^T", "x", "dY:", "MXFloat8e4m3Act", "x:", "MXFloat8e4m3Act", "(along", "tokens)"]]
    rows = {line.split()[0]: line.split() for line in lines if line.startswith(("float32 ", "mxfp4_fwd"))}
    assert rows["float32"] == ["float32", "90.0%", "0.2500", "0.5000", "-"]
    assert rows["mxfp4_fwd_mxfp8_bwd"] == ["mxfp4_fwd_mxfp8_bwd", "87.5%", "0.3000", "0.6250", "13.1", "dB"]
    assert "each of its 3 layers" in "\n".join(lines) and "straight-through" not in "\n".join(lines)


def test_text_report_of_a_weight_only_recipe_says_the_backward_is_float():
    operands = {k: None for k in _FP4_FWD_FP8_BWD} | {"weight_quant": "MXFloat4e2m1Weight"}
    text = format_report(_recipe_report(operands=operands, backward=False))
    assert "x:  float" in text and "dY: float" in text and "straight-through" in text


def test_default_text_report_has_no_recipe_section():
    assert "recipe" not in format_report(_report())


def test_json_report_of_a_recipe():
    data = json.loads(report_to_json(_recipe_report()))
    assert data["options"]["recipe"] == "mxfp4_fwd_mxfp8_bwd" and data["ptq"] == []
    assert data["recipe"] == {"name": "mxfp4_fwd_mxfp8_bwd", "operands": _FP4_FWD_FP8_BWD, "layers": 3,
                              "backward_quantized": True, "initial_grad_sqnr_db": 13.14,
                              "test": {"accuracy": 0.875, "loss": 0.3}, "loss_curve": [1.1, 0.625]}
    assert json.loads(report_to_json(_recipe_report(sqnr=math.inf)))["recipe"]["initial_grad_sqnr_db"] is None
    assert json.loads(report_to_json(_report()))["recipe"] is None
