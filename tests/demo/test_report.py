import json
import math

from groupquant.demo.pipeline import DemoOptions, DemoReport, FormatResult
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
