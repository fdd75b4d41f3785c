"""The ``mx_specs`` / ``name`` handling every compat module shares (microxcaling's module helpers)."""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .specs import MxSpecs, apply_mx_specs

__all__ = ["MxSpecsMixin"]


class MxSpecsMixin:
    """Mixed into each compat module: ``apply_mx_specs`` / ``append_name`` as microxcaling's modules
    have them; ``mx_specs=None`` means the plain torch op (:meth:`specs_or_none`)."""

    mx_none: bool
    mx_specs: MxSpecs
    name: Optional[str]

    def _init_mx(self, mx_specs: Optional[Mapping[str, Any]], name: Optional[str]) -> None:
        self.name = name
        self.apply_mx_specs(mx_specs)

    def apply_mx_specs(self, mx_specs: Optional[Mapping[str, Any]]) -> None:
        """Replace the settings (None: the plain torch op)."""
        self.mx_none = mx_specs is None
        self.mx_specs = apply_mx_specs(mx_specs)

    def append_name(self, postfix: str) -> None:
        """Append to ``name`` (microxcaling's helper)."""
        self.name = (self.name or "") + postfix

    def specs_or_none(self) -> Optional[MxSpecs]:
        """The settings, or None when the module was built without them."""
        return None if self.mx_none else self.mx_specs
