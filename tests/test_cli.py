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


def test_describe_unknown_name_fails_clearly(capsys):
    assert main(["describe", "MXFloat5"]) == 2
    assert "neither a format nor a quantizer" in capsys.readouterr().err
    assert main(["describe", "ScaleRounding"]) == 2  # an enum, not a quantizer
    assert "neither a format nor a quantizer" in capsys.readouterr().err


@pytest.mark.parametrize("name, guess", [("fp4_e2m2", "fp4_e2m1"), ("mxfp_e4m3", "mxfp8_e4m3"),
                                         ("MXFloat4e2m1Weigth", "MXFloat4e2m1Weight"),
                                         ("mxfloat6e2m3act", "MXFloat6e2m3Act")])
def test_describe_a_misspelt_name_suggests_the_closest(capsys, name, guess):
    assert main(["describe", name]) == 2
    err = capsys.readouterr().err
    assert f"{name!r} is neither a format nor a quantizer" in err and f"did you mean {guess!r}?" in err


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
    import groupquant.cli as cli

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
    assert "float training" not in captured.err  # --json hides the progress bars


def test_options_without_a_command_run_the_demo(capsys, monkeypatch):
    import groupquant.cli as cli

    seen = []
    monkeypatch.setattr(cli, "cmd_demo", lambda args: seen.append(args) or 0)
    assert main(["--epochs", "3", "--seed", "7"]) == 0
    assert seen[0].command == "demo" and seen[0].epochs == 3 and seen[0].seed == 7
    assert seen[0].formats == list(cli.MX_FORMATS)
    with pytest.raises(SystemExit):
        main(["--epochs", "-1"])
    assert "must be >= 0" in capsys.readouterr().err


def test_demo_without_its_extra_says_how_to_install(capsys, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn now raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    assert main(["demo", "--no-progress"]) == 2
    assert "pip install 'groupquant[demo]'" in capsys.readouterr().err
