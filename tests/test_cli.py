import json
import re

import pytest

from groupquant.cli import main


def test_formats_table_lists_mx_constants(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[1:] if line and not line.startswith("bits")}
    # name bits bits+scale bias emax max-normal min-normal min-subnormal specials (values from the OCP spec)
    assert rows["fp8_e4m3"] == ["fp8_e4m3", "8", "8.25", "7", "8", "448", "0.015625", "0.00195312", "nan_only"]
    assert rows["fp8_e5m2"][3:6] == ["15", "15", "57344"] and rows["fp8_e5m2"][-1] == "ieee"
    assert rows["fp6_e3m2"][2:6] == ["6.25", "3", "4", "28"]
    assert rows["fp6_e2m3"][5] == "7.5" and rows["fp4_e2m1"][2:6] == ["4.25", "1", "2", "6"]
    assert rows["int8"][4:6] == ["0", "1.98438"]


def _section(out: str, first_word: str) -> dict:
    """Rows of the table whose header starts with ``first_word``, by their first word."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_word))
    rows = {}
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows[line.split()[0]] = line.split()
    return rows


def test_formats_lists_scale_formats_and_schemes(capsys):
    assert main(["formats"]) == 0
    out = capsys.readouterr().out
    scales = _section(out, "scale format")
    # name bits min max NaN-code kind...
    assert scales["e8m0"][:5] == ["e8m0", "8", "2^-127", "2^127", "0xff"]
    assert scales["e5m0"][:5] == ["e5m0", "5", "2^-15", "2^15", "0x1f"]
    assert scales["ue4m3"][:5] == ["ue4m3", "8", "0.015625", "448", "0x7f"]
    assert scales["bfloat16"][:2] == ["bfloat16", "16"] and scales["bfloat16"][-3:] == ["-", "bfloat16", "value"]
    assert scales["float32"][:2] == ["float32", "32"] and scales["float32"][4] == "3.40282e+38"
    schemes = _section(out, "scheme")
    # scheme elements scale block tensor-scale bits/element
    assert schemes["nvfp4"] == ["nvfp4", "fp4_e2m1", "ue4m3", "16", "float32", "4.50"]
    assert schemes["mxfp4_e2m1"] == ["mxfp4_e2m1", "fp4_e2m1", "e8m0", "32", "-", "4.25"]
    assert schemes["mxint8"][-1] == "8.25" and schemes["mxfp6_e2m3"][-1] == "6.25"
    assert main(["formats", "--all"]) == 0
    assert "nvfp4" in capsys.readouterr().out


def test_formats_all_lists_aliases(capsys):
    assert main(["formats", "--all"]) == 0
    out = capsys.readouterr().out
    assert "fp4_e2m1 = mxfp4, mxfp4_e2m1" in out and "float_fnuz_e4m3" in out


def test_describe_a_format(capsys):
    assert main(["describe", "mxfp6_e2m3"]) == 0
    out = capsys.readouterr().out
    assert "max_normal           7.5" in out and "bias                 1" in out


def test_describe_a_quantizer_shows_derived_values(capsys):
    assert main(["describe", "MXFloat6e2m3Weight"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines()[1:] if line.strip())
    assert lines["max_normal"] == "7.5" and lines["group_size"] == "32" and lines["bias"] == "1"


def test_describe_a_scheme_and_a_scale_format(capsys):
    assert main(["describe", "nvfp4"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["scale_format"] == "ue4m3" and lines["block_size"] == "16" and lines["bits_per_element"] == "4.5"
    assert main(["describe", "ue4m3"]) == 0
    lines = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert lines["max"] == "448.0" and lines["min"] == "0.015625" and lines["nan_code"] == "127"
    assert main(["describe", "e5m0"]) == 0
    assert "2^15" in capsys.readouterr().out


def test_describe_unknown_name_fails_clearly(capsys):
    assert main(["describe", "MXFloat5"]) == 2
    assert "neither a format, a scale format, a scheme nor a quantizer" in capsys.readouterr().err
    assert main(["describe", "ScaleRounding"]) == 2  # an enum, not a quantizer
    assert "neither a format, a scale format, a scheme nor a quantizer" in capsys.readouterr().err


@pytest.mark.parametrize("name, guess", [("fp4_e2m2", "fp4_e2m1"), ("mxfp_e4m3", "mxfp8_e4m3"),
                                         ("MXFloat4e2m1Weigth", "MXFloat4e2m1Weight"),
                                         ("mxfloat6e2m3act", "MXFloat6e2m3Act")])
def test_describe_a_misspelt_name_suggests_the_closest(capsys, name, guess):
    assert main(["describe", name]) == 2
    err = capsys.readouterr().err
    assert f"{name!r} is neither a format, a scale format, a scheme nor a quantizer" in err and f"did you mean {guess!r}?" in err


def test_describe_far_from_any_name_suggests_nothing(capsys):
    assert main(["describe", "zzzzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err


def _usage_error(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv", [["demo", "--formats", "int4"], ["--formats", "fp4_e2m1,float_fnuz_e4m3"]])
def test_demo_rejects_a_format_that_is_not_mx_listing_the_valid_ones(capsys, argv):
    err = _usage_error(capsys, argv)
    assert "usage: python -m groupquant demo" in err and "error: argument --formats:" in err
    assert "is not an MX element format" in err and "Traceback" not in err
    assert all(name in err for name in ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4_e2m1", "mxfp4"))


@pytest.mark.parametrize("value", ["", " , ,"])
def test_demo_rejects_an_empty_format_list(capsys, value):
    err = _usage_error(capsys, ["demo", "--formats", value])
    assert "error: argument --formats: names no format" in err and "fp4_e2m1" in err


def test_demo_formats_take_aliases_as_canonical_names_once(monkeypatch):
    import groupquant.cli.entry as cli  # the module whose parser binds the commands

    seen = []
    monkeypatch.setattr(cli, "cmd_demo", lambda args: seen.append(args) or 0)
    assert main(["demo", "--formats", "mxfp4,fp8_e4m3", "FP4_E2M1", "mxint8"]) == 0
    assert seen[0].formats == ["fp4_e2m1", "fp8_e4m3", "int8"]


def test_help_lists_each_command_once(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "formats", "describe"):
        assert len(re.findall(rf"^\s+{command}\s", out, flags=re.M)) == 1, out


def test_demo_rejects_unknown_format_naming_it(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--formats", "fp4_e2m1,fp3_e1m1"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown format 'fp3_e1m1'" in err and "Traceback" not in err


def test_demo_json(capsys):
    pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
    pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")
    assert main(["demo", "--json", "--formats", "fp6_e2m3", "--epochs", "2", "--qat-epochs", "1"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert [row["fmt"] for row in data["ptq"]] == ["fp6_e2m3"]
    assert data["options"]["float_epochs"] == 2 and data["options"]["qat_epochs"] == 1
    assert data["recipe"] is None and data["options"]["recipe"] is None
    assert "float training" not in captured.err  # --json hides the progress bars


def test_options_without_a_command_run_the_demo(capsys, monkeypatch):
    import groupquant.cli.entry as cli  # the module whose parser binds the commands

    seen = []
    monkeypatch.setattr(cli, "cmd_demo", lambda args: seen.append(args) or 0)
    assert main(["--epochs", "3", "--seed", "7"]) == 0
    assert seen[0].command == "demo" and seen[0].epochs == 3 and seen[0].seed == 7
    assert seen[0].formats == list(cli.BLOCK_FORMATS)
    with pytest.raises(SystemExit):
        main(["--epochs", "-1"])
    assert "must be >= 0" in capsys.readouterr().err


def test_demo_without_its_extra_says_how_to_install(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    assert main(["demo", "--no-progress"]) == 2
    assert "pip install 'groupquant[demo]'" in capsys.readouterr().err


@pytest.mark.parametrize("name, guess", [("mxfp_8", "mxfp8"), ("mxfp4_fwd_mxfp8", "mxfp4_fwd_mxfp8_bwd")])
def test_demo_rejects_an_unknown_recipe_with_a_suggestion_and_the_list(capsys, name, guess):
    from groupquant.nn import RECIPES

    err = _usage_error(capsys, ["demo", "--recipe", name])
    assert "usage: python -m groupquant demo" in err and "error: argument --recipe:" in err
    assert f"unknown recipe {name!r}" in err and f"did you mean {guess!r}?" in err and "Traceback" not in err
    assert all(recipe in err for recipe in RECIPES)
    err = _usage_error(capsys, ["--recipe", "zzzz"])  # without the command too
    assert "error: argument --recipe: unknown recipe 'zzzz'" in err and "did you mean" not in err


def test_demo_recipe_alone_skips_ptq_and_qat_unless_asked(monkeypatch):
    pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
    pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")
    import groupquant.demo as demo

    seen = []
    monkeypatch.setattr(demo, "run_demo", lambda options: seen.append(options) or 1 / 0)
    for argv in (["demo", "--recipe", "mxfp8", "--epochs", "3"], ["demo"],
                 ["--recipe", "mxint8", "--formats", "fp4_e2m1", "--qat-epochs", "2"]):
        with pytest.raises(ZeroDivisionError):  # stop once the options are built
            main(argv + ["--no-progress"])
    assert (seen[0].recipe, seen[0].formats, seen[0].qat_epochs, seen[0].float_epochs) == ("mxfp8", (), 0, 3)
    assert (seen[1].recipe, seen[1].formats, seen[1].qat_epochs) == (None, tuple(demo.DemoOptions().formats), 4)
    assert (seen[2].recipe, seen[2].formats, seen[2].qat_epochs) == ("mxint8", ("fp4_e2m1",), 2)


def test_demo_recipe_trains_with_the_recipe_and_prints_float_vs_recipe(capsys):
    pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
    pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")
    assert main(["demo", "--recipe", "mxfp4_fwd_mxfp8_bwd", "--epochs", "3", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "post-training" not in out and "QAT" not in out
    assert re.search(r"forward +y += x W\^T +x: +MXFloat4e2m1Act +W: +MXFloat4e2m1Weight", out), out
    assert re.search(r"dX = dY W +dY: +MXFloat8e4m3Act +W: +MXFloat8e4m3Weight", out), out
    assert re.search(r"dW = dY\^T x +dY: +MXFloat8e4m3Act +x: +MXFloat8e4m3Act", out), out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith(("float32 ", "mxfp4_fwd"))}
    float_acc, recipe_acc = (float(rows[k][1].rstrip("%")) for k in ("float32", "mxfp4_fwd_mxfp8_bwd"))
    assert recipe_acc > 85 and abs(recipe_acc - float_acc) < 5
    assert rows["mxfp4_fwd_mxfp8_bwd"][-1] == "dB" and float(rows["mxfp4_fwd_mxfp8_bwd"][-2]) > 5


def test_demo_recipe_json(capsys):
    pytest.importorskip("sklearn", reason="the demo needs scikit-learn (the demo extra)")
    pytest.importorskip("tqdm", reason="the demo needs tqdm (the demo extra)")
    assert main(["demo", "--json", "--recipe", "mxfp8_e4m3_e5m2", "--epochs", "3"]) == 0
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    rec = data["recipe"]
    assert data["options"]["recipe"] == "mxfp8_e4m3_e5m2" and data["ptq"] == [] and data["qat_after"] is None
    assert rec["name"] == "mxfp8_e4m3_e5m2" and rec["layers"] == 3 and rec["backward_quantized"] is True
    assert rec["operands"]["input_quant"] == "MXFloat8e4m3Act"
    ops = rec["operands"]
    assert ops["grad_output_quant"] == ops["grad_output_quant_for_grad_weight"] == "MXFloat8e5m2Act"
    assert len(rec["loss_curve"]) == len(data["float_loss_curve"]) == 3
    assert rec["test"]["accuracy"] > 0.85 and abs(rec["test"]["accuracy"] - data["float_test"]["accuracy"]) < 0.05
    assert rec["initial_grad_sqnr_db"] > 5
    assert "recipe mxfp8_e4m3_e5m2" not in captured.err  # --json hides the progress bars


@pytest.mark.parametrize("seed", [str(2**70), "-1", "2**70"])
def test_demo_seed_out_of_range_is_one_line_naming_the_option(capsys, seed):
    with pytest.raises(SystemExit) as info:
        main(["demo", "--seed", seed, "--epochs", "0", "--qat-epochs", "0"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("python -m groupquant demo: error: argument --seed:")
    assert "Traceback" not in "".join(err)


def test_a_bad_backend_setting_is_one_line(capsys, monkeypatch):
    monkeypatch.setenv("GROUPQUANT_BACKEND", "bogus")
    assert main(["demo", "--epochs", "0", "--qat-epochs", "0", "--formats", "fp8_e4m3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: GROUPQUANT_BACKEND must be one of auto, native, reference, got 'bogus'")
    assert len(err.splitlines()) == 1
