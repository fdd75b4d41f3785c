"""The native ops' error messages are built so that no torch build can crash while formatting them.

Streaming an integer, float or bool into a ``TORCH_CHECK`` message from the extension ended the
process on torch 2.11 + CUDA 13 (a libstdc++ locale mismatch between torch and the extension), so
a bad record that the op refuses crashed instead of raising. Every message argument must be a
string literal, a ``num(...)`` call (``std::to_string``), a C string or torch's own type, which
this test reads off the sources: it needs no GPU and no build.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator, List, Tuple

import pytest

CSRC = Path(__file__).resolve().parents[2] / "src" / "groupquant" / "csrc"

#: Message arguments that are not numbers: C strings and torch types (ScalarType has its own
#: operator<< inside torch's library, compiled with torch's libstdc++).
_ALLOWED_NAMES = {"bad", "scale_error", "kScaleKindNames", "kParamFieldNames", "kPackedFieldNames", "t",
                  "data.scalar_type()", "scale.scalar_type()", "x.scalar_type()", "name",
                  "packed_cpu_paths()"}
_ALLOWED_CALLS = ("num(", "shape_text(", "cudaGetErrorString(")


def _calls(text: str) -> Iterator[Tuple[int, str]]:
    """(line, argument text) of every TORCH_CHECK* call in ``text``."""
    for m in re.finditer(r"\bTORCH_CHECK\w*\s*\(", text):
        depth, i = 1, m.end()
        while depth:
            c = text[i]
            if c == '"':
                i = text.index('"', i + 1)
                while text[i - 1] == "\\":
                    i = text.index('"', i + 1)
            depth += c == "("
            depth -= c == ")"
            i += 1
        yield text.count("\n", 0, m.start()) + 1, text[m.end():i - 1]


def _split(args: str) -> List[str]:
    """Top-level comma-separated arguments (commas inside parentheses or strings stay)."""
    out, depth, cur, in_str = [], 0, "", False
    for j, c in enumerate(args):
        if c == '"' and (j == 0 or args[j - 1] != "\\"):
            in_str = not in_str
        if not in_str:
            depth += c in "(<"
            depth -= c in ")>"
            if c == "," and depth == 0:
                out.append(cur.strip())
                cur = ""
                continue
        cur += c
    out.append(cur.strip())
    return out


def _unsafe(arg: str) -> bool:
    """Whether a message argument may be a number streamed by the extension's own libstdc++."""
    if re.fullmatch(r'("([^"\\]|\\.)*"\s*)+', arg):  # string literals (adjacent ones concatenate)
        return False
    return arg not in _ALLOWED_NAMES and not any(arg.startswith(c) and arg.endswith(")") for c in _ALLOWED_CALLS)


def _sources() -> List[Path]:
    return sorted(p for p in CSRC.iterdir() if p.suffix in (".cpp", ".h", ".cu"))


def test_the_reader_finds_the_checks() -> None:
    # the parser itself: it sees every check of ops.cpp and flags a bare number
    calls = list(_calls((CSRC / "ops.cpp").read_text()))
    assert len(calls) >= 20
    assert _unsafe("f.scale_min") and _unsafe("kNumScaleKinds - 1") and _unsafe("p.code_bits")
    assert not _unsafe('"groupquant: x " "y"') and not _unsafe("num(f.scale_max)")
    assert _split('a, "b, c", num(x, y)') == ["a", '"b, c"', "num(x, y)"]


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.name)
def test_every_check_message_streams_only_text(path: Path) -> None:
    bad = []
    for line, args in _calls(path.read_text()):
        for arg in _split(args)[1:]:  # the first argument is the condition
            if _unsafe(arg):
                bad.append(f"{path.name}:{line}: {arg}")
    assert not bad, "wrap numbers in num(...) in these TORCH_CHECK messages:\n" + "\n".join(bad)
