"""The README's and docs' code runs as written, each python block on its own; links between the
pages resolve; the generated figures are current (docs/make_figures.py); and fake_quant's
docstring example holds."""
import doctest
import importlib.util
import re
import sys
from pathlib import Path

import pytest
import torch

import groupquant as gq
from groupquant.ops import api

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

# The one substitution applied to the docs' code here: its 4096x4096 tensors shrink to 256x256
# (same code, same checks, a fraction of the time).
SIZE_SUBSTITUTION = ("4096", "256")


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _python_blocks(text: str):
    """(line number, code) of every ```python block of ``text``, in order."""
    return [(text[:m.start()].count("\n") + 2, m.group(1))
            for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)]


BLOCKS = [(page, line, code) for page in PAGES for line, code in _python_blocks(page.read_text())]


def test_first_example_blocks_run_and_print_what_the_comment_says(capsys):
    blocks = re.findall(r"```python\n(.*?)```", _section("A first example"), flags=re.S)
    assert len(blocks) == 2
    for block in blocks:  # each on its own
        exec(compile(block.replace(*SIZE_SUBSTITUTION), str(README), "exec"), {})
    assert capsys.readouterr().out.strip() == "7.5 torch.Size([10, 2, 1])"


def test_python_blocks_are_found_whole():
    for page in PAGES:
        text = page.read_text()
        blocks = _python_blocks(text)
        assert len(blocks) == text.count("```python"), page
        assert all("```" not in code for _, code in blocks), page
    assert len(BLOCKS) >= 15


def _files_the_block_writes(code: str):
    """The file names a block saves to (torch.save / export_onnx with a literal name)."""
    return set(re.findall(r"(?:torch\.save|export_onnx)\([^\n]*?\"([\w.]+\.(?:pt|onnx))\"", code))


@pytest.mark.parametrize("page,line,code", BLOCKS, ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in BLOCKS])
def test_every_python_block_runs_on_its_own(page, line, code, tmp_path, monkeypatch):
    """A reader who copies any one block into a fresh session succeeds (no names from other blocks)."""
    if "onnx" in code:
        pytest.importorskip("onnx", reason="the ONNX block needs the 'export' extra")
        pytest.importorskip("onnxruntime", reason="the ONNX block needs the 'export' extra")
    monkeypatch.chdir(tmp_path)  # blocks write model files into the working directory
    namespace: dict = {"__name__": "__docs__"}
    try:
        exec(compile("\n" * (line - 1) + code.replace(*SIZE_SUBSTITUTION), str(page), "exec"), namespace)
    except Exception as exc:  # name the block: page, line N
        raise AssertionError(f"the python block at {page.relative_to(ROOT)}:{line} fails: {exc!r}") from exc
    assert _files_the_block_writes(code) <= {p.name for p in tmp_path.iterdir()}


def test_the_blocks_that_save_models_and_convert_one_are_still_there(capsys):
    written = set().union(*(_files_the_block_writes(code) for _, _, code in BLOCKS))
    assert {"qat.pt", "model.gq.pt", "model.onnx"} <= written
    (convert,) = [code for _, _, code in BLOCKS if "exclude=[\"head\"]" in code]
    exec(compile(convert, "convert", "exec"), {})
    assert capsys.readouterr().out.strip() == "QuantLinear Linear"


def test_top_commands_are_the_make_targets():
    head = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in head.strip().splitlines()] == [["make", "demo"], ["make", "test"]]


def test_links_between_pages_resolve():
    """Every relative link of README.md and docs/*.md names a file that exists (and an anchor of
    it, where given, is one of its headings)."""
    def anchors(path: Path):
        headings = re.findall(r"^#+ (.*)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), flags=re.M)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}

    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+://", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            assert path.exists(), f"{page.name} links to missing {target}"
            if anchor and path.suffix == ".md":
                assert anchor in anchors(path), f"{page.name} links to missing anchor {target}"


def test_the_readme_stays_a_first_read():
    text = README.read_text()
    assert len(text) < 12_000
    assert {"## A first example", "## Features", "## Documentation"} <= set(re.findall(r"^## .*$", text, re.M))


def _make_figures():
    spec = importlib.util.spec_from_file_location("make_figures", ROOT / "docs" / "make_figures.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_fast_generated_figures_are_current():
    """What docs/make_figures.py --fast would write is what the pages hold (rerun it after a change)."""
    figures = _make_figures()
    for page in figures.PAGES:
        text = page.read_text()
        assert figures.render(text, fast_only=True) == text, f"run: PYTHONPATH=src python docs/make_figures.py --fast ({page.name})"


def test_make_figures_fills_regions_from_the_block_above_and_leaves_slow_ones_in_fast_mode():
    figures = _make_figures()
    text = ("```python\nprint(6 * 7)\n```\n\n<!-- figures:output -->\nold\n<!-- /figures:output -->\n"
            "<!-- figures:test-suite -->\nkept\n<!-- /figures:test-suite -->\n")
    new = figures.render(text, fast_only=True)
    assert "```text\n42\n```\n<!-- /figures:output -->" in new
    assert "<!-- figures:test-suite -->\nkept\n" in new
    assert figures.render(new, fast_only=True) == new
    with pytest.raises(ValueError, match="unknown figures region 'bogus'"):
        figures.render("<!-- figures:bogus -->\n<!-- /figures:bogus -->\n")
    with pytest.raises(ValueError, match="must follow a ```python block"):
        figures.render("<!-- figures:output -->\n<!-- /figures:output -->\n")


def _result_files():
    spec = importlib.util.spec_from_file_location("result_files", ROOT / "benchmarks" / "result_files.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_benchmark_saved_with_save_is_what_its_region_of_the_benchmarks_page_shows(tmp_path, monkeypatch):
    """``--save NAME`` writes the printed table and the command without ``--save``; make_figures
    copies that file, unchanged, into region ``bench-NAME``."""
    results, figures = _result_files(), _make_figures()
    for name in ("OMP_NUM_THREADS", "GROUPQUANT_BACKEND", "GROUPQUANT_CPU_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(results, "RESULTS", tmp_path)
    with results.saved_output("tiny-table", "/x/benchmarks/bench_tiny.py", ["--rows", "2", "--save", "tiny-table"]):
        print("row  ms\nA    1.5")
    text = (tmp_path / "tiny-table.md").read_text()
    assert text.startswith("Command: `OMP_NUM_THREADS=3 PYTHONPATH=src python benchmarks/bench_tiny.py --rows 2`\n")
    assert text.endswith("```text\nrow  ms\nA    1.5\n```\n")
    monkeypatch.setattr(figures, "BENCH_RESULTS", tmp_path)
    page = "intro\n<!-- figures:bench-tiny-table -->\nstale\n<!-- /figures:bench-tiny-table -->\nend\n"
    assert figures.render(page, fast_only=True) == \
        f"intro\n<!-- figures:bench-tiny-table -->\n{text}<!-- /figures:bench-tiny-table -->\nend\n"
    with pytest.raises(ValueError, match="no result file .*--save missing"):
        figures.render("<!-- figures:bench-missing -->\n<!-- /figures:bench-missing -->\n")


def test_every_benchmark_result_file_is_on_the_benchmarks_page_once():
    figures = _make_figures()
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    shown = re.findall(r"<!-- figures:bench-([\w-]+) -->", page)
    files = sorted(p.stem for p in (ROOT / "benchmarks" / "results").glob("*.md"))
    assert sorted(shown) == files and len(files) >= 6
    assert not any("figures:bench-" in p.read_text() for p in figures.PAGES if p.name != "benchmarks.md")


def test_fake_quant_docstring_example():
    finder = doctest.DocTestFinder()
    tests = finder.find(api.fake_quant, "fake_quant", globs={"torch": torch, "fake_quant": gq.fake_quant})
    results = [doctest.DocTestRunner().run(t) for t in tests]
    assert sum(r.attempted for r in results) == 3 and sum(r.failed for r in results) == 0
