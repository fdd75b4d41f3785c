"""The error every exporter raises for a layer or operation it cannot export."""
from __future__ import annotations

__all__ = ["ExportError"]


class ExportError(ValueError):
    """A model part that cannot be exported; the message names the layer (module path) or op."""

    def __init__(self, where: str, what: str, reason: str) -> None:
        self.where, self.what, self.reason = where, what, reason
        super().__init__(f"cannot export {where!r} ({what}): {reason}")
