"""The README's first examples run as written, and fake_quant's docstring example holds."""
import doctest
import re
from pathlib import Path

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


def test_top_commands_are_the_make_targets():
    head = README.read_text().split("```bash\n", 1)[1].split("```", 1)[0]
    assert [line.split()[:2] for line in head.strip().splitlines()] == [["make", "demo"], ["make", "test"]]


def test_fake_quant_docstring_example():
    finder = doctest.DocTestFinder()
    tests = finder.find(api.fake_quant, "fake_quant", globs={"torch": torch, "fake_quant": gq.fake_quant})
    results = [doctest.DocTestRunner().run(t) for t in tests]
    assert sum(r.attempted for r in results) == 3 and sum(r.failed for r in results) == 0
