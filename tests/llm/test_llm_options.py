"""``python -m groupquant llm``: what cannot work stops before the model is loaded, with one line
and exit status 2; the empty prompt and the file column mean what they say."""
import shutil

import pytest
import torch

import groupquant
from groupquant.cli import main

pytest.importorskip("transformers", reason="the llm command needs the llm extra (transformers)")
SEQ = 32


def _args(folder, *more):
    return ["llm", str(folder), "--seq-len", str(SEQ), "--eval-tokens", str(2 * SEQ), "--max-new-tokens", "3",
            "--no-progress", *more]


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if the workflow loads the model (the checks must come first)."""
    import groupquant.llm.run as run

    def refuse(source):
        raise AssertionError(f"the model {source.label} was loaded before the check")
    monkeypatch.setattr(run, "load_causal_lm", refuse)


def _exit_2(capsys, argv):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("fmt", ["gguf", "compressed-tensors"])
def test_a_format_that_cannot_hold_the_recipe_stops_before_loading(llama_folder, capsys, tmp_path, no_loading, fmt):
    folder, _, _ = llama_folder
    err = _exit_2(capsys, _args(folder, "--recipe", "mxfp8", "--save", str(tmp_path / "out"), "--format", fmt))
    assert f"--format {fmt} cannot hold the weights of --recipe mxfp8" in err and "fp8_e4m3" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["gguf", "compressed-tensors"])
def test_rotate_with_a_foreign_format_stops_before_loading(llama_folder, capsys, tmp_path, no_loading, fmt):
    folder, _, _ = llama_folder
    err = _exit_2(capsys, _args(folder, "--recipe", "mxfp4", "--methods", "smooth,rotate", "--save",
                                str(tmp_path / "out"), "--format", fmt))
    assert f"runs 'rotate' (smooth, rotate), whose online rotation --format {fmt} cannot hold" in err
    assert "choose --methods without rotate (e.g. smooth)" in err


def test_save_onto_a_file_stops_before_loading(llama_folder, capsys, tmp_path, no_loading):
    folder, _, _ = llama_folder
    (tmp_path / "taken").write_text("x")
    err = _exit_2(capsys, _args(folder, "--recipe", "mxfp4", "--save", str(tmp_path / "taken")))
    assert "--save '" in err and "taken': a file is there" in err
    assert (tmp_path / "taken").read_text() == "x"


def test_model_sources_that_cannot_load_are_refused_at_parse_time(llama_folder, capsys, tmp_path, no_loading):
    folder, _, _ = llama_folder
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare, ignore=shutil.ignore_patterns("tokenizer*", "special_tokens*"))
    assert "the folder has no tokenizer" in _exit_2(capsys, _args(bare, "--recipe", "mxfp4"))
    gguf = pytest.importorskip("gguf")
    model = groupquant.quantize_model(torch.nn.Sequential(torch.nn.Linear(64, 64)), recipe="mxfp4_weight_only")
    path = groupquant.save(model, tmp_path / "own.gguf", format="gguf")  # groupquant's own layout, no tokenizer
    assert "general.architecture = groupquant" in _exit_2(capsys, _args(path, "--recipe", "mxfp4"))
    writer = gguf.GGUFWriter(str(tmp_path / "notok.gguf"), "llama")
    for step in (writer.write_header_to_file, writer.write_kv_data_to_file, writer.write_tensors_to_file, writer.close):
        step()
    assert "has no tokenizer (tokenizer.ggml.* keys)" in _exit_2(capsys, _args(tmp_path / "notok.gguf", "--recipe",
                                                                                "mxfp4"))
    data = path.read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[:len(data) // 3])
    assert "not a readable GGUF file" in _exit_2(capsys, _args(tmp_path / "cut.gguf", "--recipe", "mxfp4"))


def test_seq_len_one_and_an_empty_prompt_are_refused(llama_folder, capsys, no_loading):
    folder, _, _ = llama_folder
    err = _exit_2(capsys, ["llm", str(folder), "--recipe", "mxfp4", "--seq-len", "1"])
    assert "--seq-len: must be >= 2 (a window predicts each token from the ones before it), got 1" in err
    err = _exit_2(capsys, _args(folder, "--recipe", "mxfp4", "--generate", ""))
    assert "--generate: the prompt is empty" in err


def test_file_column_counts_the_checkpoint_only(llama_folder, capsys, tmp_path):
    folder, _, _ = llama_folder
    out = tmp_path / "out"
    out.mkdir()
    (out / "old.bin").write_bytes(b"\0" * (3 << 20))  # 3 MiB already in the folder
    assert main(_args(folder, "--recipe", "mxfp4_weight_only", "--save", str(out))) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("mxfp4_weight_only rtn"))
    file_mib = float(line.split()[-2])
    assert file_mib == pytest.approx((out / "model.safetensors").stat().st_size / 2 ** 20, abs=0.051)
