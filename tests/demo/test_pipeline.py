import math

import pytest

pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")

from groupquant.demo.pipeline import DemoOptions, bits_per_element, run_demo  # noqa: E402


@pytest.fixture(scope="module")
def small_report():
    return run_demo(DemoOptions(formats=("fp4_e2m1", "mxint8", "fp8_e4m3"), float_epochs=4, qat_epochs=2,
                                hidden=(32,), progress=False))


def test_report_has_a_row_per_format_in_order(small_report):
    r = small_report
    assert [row.fmt for row in r.ptq] == ["fp4_e2m1", "int8", "fp8_e4m3"]
    assert r.train_size + r.test_size == 1797
    assert r.num_parameters == 64 * 32 + 32 + 32 * 10 + 10
    assert r.float_bytes == 4 * r.num_parameters
    assert len(r.float_loss_curve) == 4 and len(r.qat_loss_curve) == 2
    assert r.float_test.accuracy > 0.85


def test_finer_formats_quantize_weights_more_accurately(small_report):
    sqnr = {row.fmt: row.weight_sqnr_db for row in small_report.ptq}
    # int8 keeps 7 fraction bits at the top binade, e4m3 3 mantissa bits, e2m1 1: about 6 dB per bit
    assert sqnr["int8"] > sqnr["fp8_e4m3"] > sqnr["fp4_e2m1"] > 10
    packed = {row.fmt: row.packed_bytes for row in small_report.ptq}
    assert packed["fp4_e2m1"] < packed["int8"] == packed["fp8_e4m3"] < small_report.float_bytes


def test_qat_starts_from_the_ptq_model(small_report):
    r = small_report
    fp4 = next(row for row in r.ptq if row.fmt == "fp4_e2m1")
    assert r.qat_format == "fp4_e2m1"
    assert r.qat_before.accuracy == fp4.test.accuracy and r.qat_before.loss == fp4.test.loss
    assert math.isfinite(r.qat_after.loss)


def test_bits_per_element_counts_the_scale():
    assert bits_per_element("fp4_e2m1") == 4.25
    assert bits_per_element("fp6_e2m3") == 6.25
    assert bits_per_element("int8", block_size=16) == 8.5


def test_options_check_format_names():
    with pytest.raises(ValueError, match="unknown format"):
        DemoOptions(formats=("fp4_e2m1", "fp3"))
    with pytest.raises(ValueError, match="formats"):
        DemoOptions(formats=())
