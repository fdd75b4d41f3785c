"""The README's code runs as written (every python block, in order), and fake_quant's docstring example holds."""
import doctest
import re
from pathlib import Path

import pytest
import torch

import groupquant as gq
from groupquant.ops import api

README = Path(__file__).resolve().parents[1] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def test_first_example_blocks_run_and_print_what_the_comment_says(capsys):
    blocks = re.findall(r"```python\n(.*?)```", _section("A first example"), flags=re.S)
    assert len(blocks) == 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block.replace("4096", "256"), str(README), "exec"), namespace)  # smaller tensors, same code
    assert capsys.readouterr().out.strip() == "7.5 torch.Size([10, 2, 1])"


# The one substitution applied to the README's code here: its 4096x4096 tensors shrink to 256x256
# (same code, same checks, a fraction of the time).
SIZE_SUBSTITUTION = ("4096", "256")


def _python_blocks(text: str):
    """(line number, code) of every ```python block of ``text``, in order."""
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)]


def test_python_blocks_are_found_whole():
    text = README.read_text()
    blocks = _python_blocks(text)
    assert len(blocks) == text.count("```python") >= 9
    assert all("```" not in code for _, code in blocks)


def test_every_python_block_runs_in_order_in_one_namespace(tmp_path, monkeypatch, capsys):
    """A reader who copies the README's python blocks one after another into one session succeeds."""
    pytest.importorskip("onnx", reason="the ONNX block needs the 'export' extra")
    pytest.importorskip("onnxruntime", reason="the ONNX block needs the 'export' extra")
    monkeypatch.chdir(tmp_path)  # the blocks write model files into the working directory
    namespace: dict = {"__name__": "__readme__"}
    for line, code in _python_blocks(README.read_text()):
        code = code.replace(*SIZE_SUBSTITUTION)
        try:
            exec(compile("\n" * (line - 1) + code, str(README), "exec"), namespace)
        except Exception as exc:  # name the block: README.md line N
            raise AssertionError(f"the README's python block at line {line} fails: {exc!r}") from exc
    out = capsys.readouterr().out
    assert "7.5 torch.Size([10, 2, 1])" in out and "QuantLinear Linear" in out
    assert {"qat.pt", "model.gq.pt", "model.onnx"} <= {p.name for p in tmp_path.iterdir()}


def test_top_commands_are_the_make_targets():
    head = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in head.strip().splitlines()] == [["make", "demo"], ["make", "test"]]


def test_fake_quant_docstring_example():
    finder = doctest.DocTestFinder()
    tests = finder.find(api.fake_quant, "fake_quant", globs={"torch": torch, "fake_quant": gq.fake_quant})
    results = [doctest.DocTestRunner().run(t) for t in tests]
    assert sum(r.attempted for r in results) == 3 and sum(r.failed for r in results) == 0
