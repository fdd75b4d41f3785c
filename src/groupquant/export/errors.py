"""The export errors: one base class, one subclass per job (ONNX, packed inference, checkpoints).

Every error a ``groupquant.export`` route raises for a model part or file it cannot handle is an
:class:`ExportBaseError` (a ``ValueError``), so one ``except`` catches them all; each job keeps its
own name for what it refuses, and each message names the layer, op or file.
"""
from __future__ import annotations

__all__ = ["ExportBaseError", "ExportError", "PackError", "CheckpointError"]


class ExportBaseError(ValueError):
    """What every export route raises for a layer, op or file it cannot handle (the message names it)."""


class ExportError(ExportBaseError):
    """A model part that cannot be exported to ONNX; the message names the layer (module path) or op."""

    def __init__(self, where: str, what: str, reason: str) -> None:
        self.where, self.what, self.reason = where, what, reason
        super().__init__(f"cannot export {where!r} ({what}): {reason}")


class PackError(ExportBaseError):
    """A layer or packed weight that a packed inference layer cannot take (the message names both)."""


class CheckpointError(ExportBaseError):
    """A layer a checkpoint format cannot hold, or a file that is not a checkpoint this reader knows
    (the message names the layer or the file, and the format)."""
