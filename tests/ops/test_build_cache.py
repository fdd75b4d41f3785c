"""The kernel build cache: one build per checkout (no rebuild when switching between checkouts of
one commit), and the "groupquant: building ..." line whenever a build runs, never otherwise."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import List

import pytest

from groupquant.ops import native


@pytest.fixture
def two_checkouts(tmp_path: Path):
    """Two copies of the kernel sources (as two checkouts of one commit would hold them)."""
    a, b = tmp_path / "a" / "csrc", tmp_path / "b" / "csrc"
    shutil.copytree(native.CSRC, a)
    shutil.copytree(native.CSRC, b)
    return a, b


def test_names_differ_between_checkouts_and_agree_within_one(two_checkouts):
    a, b = two_checkouts
    assert native.extension_name(False, a) != native.extension_name(False, b)
    assert native.extension_name(False, a) == native.extension_name(False, a)
    assert native.extension_name(False, a) == native.extension_name(False, a.parent / ".." / "a" / "csrc")
    assert native.extension_name(True, a) != native.extension_name(False, a)
    before = native.extension_name(False, a)
    (a / "group_quant.h").write_text((a / "group_quant.h").read_text() + "\n// changed\n")
    assert native.extension_name(False, a) != before  # other sources: another build too


def _fake_build(build_dir: Path, name: str, sources: List[str]) -> None:
    """What a finished build leaves: the recipe naming the sources, and the library."""
    (build_dir / "build.ninja").write_text("".join(f"build x.o: compile {os.path.abspath(s)}\n" for s in sources))
    (build_dir / f"{name}.so").write_bytes(b"\x7fELF")


def test_needs_build_decides_as_ninja_does(two_checkouts, tmp_path: Path):
    a, b = two_checkouts
    sources = [str(a / "ops.cpp"), str(a / "group_quant_cpu.cpp")]
    build_dir = tmp_path / "build"
    build_dir.mkdir()
    assert native.needs_build(str(build_dir), "ext", sources, a)  # nothing built yet
    _fake_build(build_dir, "ext", sources)
    assert not native.needs_build(str(build_dir), "ext", sources, a)
    other = [str(b / "ops.cpp"), str(b / "group_quant_cpu.cpp")]
    assert native.needs_build(str(build_dir), "ext", other, b)  # the recipe names another checkout's files
    later = (build_dir / "ext.so").stat().st_mtime_ns + 10 ** 9
    os.utime(a / "group_quant_params.h", ns=(later, later))
    assert native.needs_build(str(build_dir), "ext", sources, a)  # a header newer than the library


class _Loader:
    """Stands in for torch's cpp_extension.load: builds (writes the library) or not."""

    def __init__(self, build_dir: Path, builds: bool) -> None:
        self.build_dir, self.builds, self.calls = build_dir, builds, 0

    def __call__(self, name: str, sources: List[str], build_directory: str, **_kwargs) -> None:
        self.calls += 1
        if self.builds:
            _fake_build(Path(build_directory), name, sources)


@pytest.mark.parametrize("state,builds,expected", [
    ("empty", True, ["building", "(done)"]),   # foreseen: a line before the build and one after it
    ("built", False, []),                      # up to date: silent
    ("built", True, ["(done)"]),               # a build the check missed: the line after it
])
def test_the_build_lines_appear_exactly_when_a_build_runs(monkeypatch, tmp_path, capsys, state, builds, expected):
    from torch.utils import cpp_extension

    monkeypatch.setenv(native.BUILD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(native, "_cuda_build", lambda: False)
    monkeypatch.setitem(native._state, "cuda", False)
    name = native.extension_name(False)
    build_dir = tmp_path / name
    build_dir.mkdir()
    if state == "built":
        _fake_build(build_dir, name, [str(native.CSRC / s) for s in native._CPU_SOURCES])
        newest = max(p.stat().st_mtime_ns for p in native.CSRC.iterdir())
        os.utime(build_dir / f"{name}.so", ns=(newest + 10 ** 9, newest + 10 ** 9))
    loader = _Loader(build_dir, builds)
    monkeypatch.setattr(cpp_extension, "load", loader)
    native._build()
    err = capsys.readouterr().err
    assert loader.calls == 1
    lines = [line for line in err.splitlines() if line.startswith("groupquant: buil")]
    assert len(lines) == len(expected)
    for line, marker in zip(lines, expected):
        assert marker in line and str(build_dir) in line


def test_the_build_lines_say_what_is_built_how_long_it_usually_takes_and_took(monkeypatch, tmp_path, capsys):
    """The line before the build names the instruction set and the usual time, and is printed
    before the compiler starts; the line after gives the time the build took."""
    import torch
    from torch.utils import cpp_extension

    monkeypatch.setenv(native.BUILD_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(native, "_cuda_build", lambda: False)
    monkeypatch.setitem(native._state, "cuda", False)
    seen_before_compiling: List[str] = []
    loader = _Loader(tmp_path / native.extension_name(False), True)

    def compiling(**kwargs) -> None:
        seen_before_compiling.append(capsys.readouterr().err)
        loader(**kwargs)

    monkeypatch.setattr(cpp_extension, "load", compiling)
    native._build()
    isa = torch.backends.cpu.get_cpu_capability().lower()
    (before,) = [line for line in seen_before_compiling[0].splitlines() if line.startswith("groupquant:")]
    assert f"(CPU, {isa})" in before and "usually 20-60 s" in before and "first use of this checkout" in before
    (after,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("groupquant:")]
    took = after.split(" in ")[-1].split(" s (done)")[0]
    assert float(took) >= 0 and after.endswith(" s (done)")


def test_build_progress_counts_compiled_files_while_the_build_runs(tmp_path, capsys) -> None:
    import time as _time
    with native.BuildProgress(str(tmp_path), total=4, every=0.05) as progress:
        (tmp_path / "a.o").write_bytes(b"")
        (tmp_path / "b.cuda.o").write_bytes(b"")
        _time.sleep(0.3)
        assert progress.line().startswith("groupquant: still building the native kernels: 2 of 4 source files")
    lines = capsys.readouterr().err.splitlines()
    assert lines and all("of 4 source files compiled" in line for line in lines)
    with native.BuildProgress(str(tmp_path), total=4, every=None):  # not announced: silent
        _time.sleep(0.1)
    assert capsys.readouterr().err == ""
