"""The checkpoint formats as one table: name, how a file is recognised, its writer and its reader.

``groupquant.save`` looks a ``format=`` name up here for the writer (and the per-layer rule the writer
applies); ``groupquant.load`` walks the table in order and reads a path with the first format whose
``detect`` accepts it. A format is one row: its module names the functions, which are imported on
first use (each format's package, e.g. ``gguf`` or ``safetensors``, is needed only when it is used).

Order (``load``'s detection): a directory is compressed-tensors; a file starting with ``GGUF`` is
GGUF; a safetensors file without groupquant's metadata holding ``<name>_blocks`` / ``<name>_scales``
pairs is a gpt-oss MXFP4 checkpoint (read only); any other file is read as groupquant's safetensors
checkpoint (which names the file when it is not one).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Tuple

from ..errors import CheckpointError
from .gpt_oss import is_gpt_oss_mxfp4

__all__ = ["CheckpointFormat", "FORMAT_TABLE", "CHECKPOINT_FORMATS", "format_named", "format_of"]


def _is_directory(path: Path) -> bool:
    """A compressed-tensors checkpoint is a directory (``model.safetensors`` + ``config.json``)."""
    return path.is_dir()


def _is_gguf(path: Path) -> bool:
    """A GGUF file starts with the four bytes ``GGUF``."""
    with open(path, "rb") as f:
        return f.read(4) == b"GGUF"


def _any_file(path: Path) -> bool:
    """The last row: every file (groupquant's safetensors reader names a file that is not one)."""
    return path.is_file()


@dataclass(frozen=True)
class CheckpointFormat:
    """One row of :data:`FORMAT_TABLE`.

    Fields:
        name: the ``format=`` value of ``save`` and the ``format`` of a ``LoadedCheckpoint``.
        detect: ``path -> bool``, True when ``load`` should read ``path`` with this format (cheap: a
            look at the path or the file's first bytes, no format package).
        module: the module of this package holding the functions named below.
        read: the reader's name, ``(path) -> CheckpointContents``.
        write: the writer's name, ``(CheckpointContents, path) -> None``; None for a read-only format.
        weight_check: the name of the writer's per-layer rule, ``(PackedTensor, where) -> None``
            (CheckpointError for a weight the format cannot hold); None where it holds every packed weight.
        directory: True when the format writes a directory, False for one file.
    """

    name: str
    detect: Callable[[Path], bool]
    module: str
    read: str
    write: Optional[str] = None
    weight_check: Optional[str] = None
    directory: bool = False

    def function(self, name: str) -> Callable:
        """The function ``name`` of this format's module (imported on first use)."""
        return getattr(importlib.import_module(f"{__package__}.{self.module}"), name)


#: Every checkpoint format, in ``load``'s detection order (the last row accepts any file).
FORMAT_TABLE: Tuple[CheckpointFormat, ...] = (
    CheckpointFormat("compressed-tensors", _is_directory, "compressed_tensors", "read_compressed_tensors",
                     "write_compressed_tensors", "ct_scheme_of", directory=True),
    CheckpointFormat("gguf", _is_gguf, "gguf", "read_gguf", "write_gguf", "check_gguf_weight"),
    CheckpointFormat("gpt-oss-mxfp4", is_gpt_oss_mxfp4, "gpt_oss", "read_gpt_oss_mxfp4"),
    CheckpointFormat("safetensors", _any_file, "safetensors", "read_safetensors", "write_safetensors"),
)

#: The ``format=`` values of ``save``: the formats with a writer, groupquant's own first.
CHECKPOINT_FORMATS: Tuple[str, ...] = ("safetensors",) + tuple(
    f.name for f in FORMAT_TABLE if f.write is not None and f.name != "safetensors")


def format_named(name: str) -> CheckpointFormat:
    """The writable format ``name``; ValueError naming the setting and the choices otherwise."""
    for fmt in FORMAT_TABLE:
        if fmt.name == name and fmt.write is not None:
            return fmt
    read_only = [f.name for f in FORMAT_TABLE if f.write is None]
    note = f" ({name} is read only: groupquant.load reads it)" if name in read_only else ""
    raise ValueError(f"groupquant.save: format={name!r} is not one of {list(CHECKPOINT_FORMATS)}{note}")


def format_of(path: Path) -> CheckpointFormat:
    """The format ``load`` reads ``path`` with (the first row whose ``detect`` accepts it);
    FileNotFoundError where nothing is at ``path``, CheckpointError for an empty file."""
    if not path.is_dir() and not path.is_file():
        raise FileNotFoundError(f"groupquant.load: no checkpoint at {path}")
    if path.is_file() and path.stat().st_size == 0:
        raise CheckpointError(f"groupquant.load: {path} is empty (0 bytes), not a checkpoint")
    for fmt in FORMAT_TABLE:
        if fmt.detect(path):
            return fmt
    raise CheckpointError(f"groupquant.load: no checkpoint format recognises {path}")
