import math

import pytest

pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")

from groupquant.demo.pipeline import DemoOptions, bits_per_element, run_demo  # noqa: E402
from groupquant.demo.report import format_report  # noqa: E402
from groupquant.inject import UnknownSettingError  # noqa: E402


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


def test_options_check_the_recipe_name():
    with pytest.raises(UnknownSettingError, match="did you mean 'mxfp4_fwd_mxfp8_bwd'"):
        DemoOptions(recipe="mxfp4_fwd_mxfp8bwd")
    assert DemoOptions(formats=(), recipe="mxfp8").formats == ()  # a recipe alone needs no PTQ format


@pytest.fixture(scope="module")
def recipe_report():
    return run_demo(DemoOptions(formats=(), qat_epochs=0, float_epochs=4, hidden=(32,), progress=False,
                                recipe="mxfp8"))


def test_recipe_run_trains_with_quantized_gemms_close_to_float(recipe_report):
    r = recipe_report
    assert r.ptq == [] and r.qat_format is None and r.qat_after is None
    rec = r.recipe
    assert rec.name == "mxfp8" and rec.layers == 2 and rec.backward_quantized
    assert rec.operands["grad_output_quant"] == "MXFloat8e4m3Act"
    assert rec.operands["weight_quant_for_grad_input"] == "MXFloat8e4m3Weight"
    assert len(rec.loss_curve) == len(r.float_loss_curve) == 4
    assert rec.loss_curve[-1] < rec.loss_curve[0]
    # the same initial weights and batches: MXFP8 training follows float closely, but not exactly
    assert rec.loss_curve != r.float_loss_curve
    assert all(abs(a - b) < 0.1 * b + 0.01 for a, b in zip(rec.loss_curve, r.float_loss_curve))
    assert rec.test.accuracy > 0.85 and abs(rec.test.accuracy - r.float_test.accuracy) < 0.04
    assert abs(rec.test.loss - r.float_test.loss) < 0.1
    assert 10 < rec.initial_grad_sqnr_db < 60


def test_recipe_run_keeps_the_float_run_unchanged(recipe_report, small_report):
    # the float model with hidden=(32,) and 4 epochs trains the same with or without a recipe run
    assert recipe_report.float_loss_curve == small_report.float_loss_curve
    assert recipe_report.float_test == small_report.float_test


def test_weight_only_recipe_keeps_the_backward_in_float():
    r = run_demo(DemoOptions(formats=("fp4_e2m1",), qat_epochs=0, float_epochs=2, hidden=(32,), progress=False,
                             recipe="mxfp4_weight_only"))
    assert [row.fmt for row in r.ptq] == ["fp4_e2m1"]  # PTQ runs beside the recipe when asked for
    assert not r.recipe.backward_quantized
    assert r.recipe.operands["input_quant"] is None and r.recipe.operands["grad_output_quant"] is None
    assert r.recipe.operands["weight_quant"] == "MXFloat4e2m1Weight"


def test_packed_models_compute_the_ptq_models_in_fewer_bytes(small_report):
    ptq = {row.fmt: row for row in small_report.ptq}
    assert [p.fmt for p in small_report.packed] == [row.fmt for row in small_report.ptq]
    for p in small_report.packed:
        assert p.test.accuracy == ptq[p.fmt].test.accuracy
        assert abs(p.test.loss - ptq[p.fmt].test.loss) < 1e-4
        assert p.state_bytes < small_report.float_bytes and min(p.packed_ms, p.fake_quant_ms, p.float_ms) > 0
    assert "packed inference" in format_report(small_report)
