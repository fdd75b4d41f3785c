"""Checkpoint files written beside their target, then renamed onto it.

A save that fails part way (a full disk, an error in a writer, an interrupt) leaves the file or
folder that was at the path as it was, and no partial file: every checkpoint writer writes into a
temporary name in the same directory (``.<name>.<pid>.partial``, same file system, so the rename
is atomic) and moves it onto the target only once the whole file is written (``os.replace``).
A directory checkpoint (compressed-tensors) is written whole into a temporary directory; its files
then replace the target's one by one (each file atomically; files of the folder it does not write,
such as a tokenizer, stay).
"""
from __future__ import annotations

import os
import shutil
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Iterator

__all__ = ["written_beside", "directory_written_beside"]


def _partial(path: Path) -> Path:
    """The temporary name beside ``path`` (hidden, per process)."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


@contextmanager
def written_beside(path: Path) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; once the block finishes, rename it onto ``path``.
    If the block raises, the temporary file is removed and ``path`` is untouched."""
    tmp = _partial(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextmanager
def directory_written_beside(path: Path) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path``; once the block finishes, move each file
    written there into ``path`` (created if needed; each file replaced atomically). If the block
    raises, the temporary directory is removed and ``path`` is untouched."""
    tmp = _partial(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        path.mkdir(parents=True, exist_ok=True)
        for item in sorted(tmp.iterdir()):
            os.replace(item, path / item.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
