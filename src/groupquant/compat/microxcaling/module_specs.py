"""The compat modules: torch's module classes taking microxcaling's ``mx_specs`` and ``name``."""
from __future__ import annotations

from typing import Any, Callable, Optional

from torch import Tensor

from .specs import MxSpecs, Specs, apply_mx_specs

__all__ = ["MxSpecsMixin", "mx_module", "calls"]

Forward = Callable[[Any, Tensor], Tensor]


class MxSpecsMixin:
    """microxcaling's module helpers, mixed into each compat module (``mx_specs=None``: the plain torch op)."""

    mx_none: bool
    mx_specs: MxSpecs
    name: Optional[str]

    def _init_mx(self, mx_specs: Specs, name: Optional[str]) -> None:
        self.name = name
        self.apply_mx_specs(mx_specs)

    def apply_mx_specs(self, mx_specs: Specs) -> None:
        """Replace the settings (None: the plain torch op)."""
        self.mx_none = mx_specs is None
        self.mx_specs = apply_mx_specs(mx_specs)

    def append_name(self, postfix: str) -> None:
        """Append to ``name`` (microxcaling's helper)."""
        self.name = (self.name or "") + postfix

    def specs_or_none(self) -> Optional[MxSpecs]:
        """The settings, or None when the module was built without them."""
        return None if self.mx_none else self.mx_specs


def calls(function: Callable[..., Tensor], *attributes: str) -> Forward:
    """The forward ``function(input, *module.<attributes>, mx_specs=module.specs_or_none())``."""

    def forward(self: Any, input: Tensor) -> Tensor:
        return function(input, *(getattr(self, a) for a in attributes), mx_specs=self.specs_or_none())

    forward.__module__ = function.__module__
    return forward


def mx_module(base: type, torch_args: int, forward: Forward) -> type:
    """The compat class of torch module ``base`` with ``forward``: ``mx_specs`` and ``name`` follow its first
    ``torch_args`` positional arguments (microxcaling's order) or come as keywords."""

    def __init__(self: Any, *args: Any, mx_specs: Specs = None, name: Optional[str] = None, **kwargs: Any) -> None:
        base.__init__(self, *args[:torch_args], **kwargs)
        if len(args) > torch_args:  # mx_specs (and name) given by position, as microxcaling allows
            mx_specs, *rest = args[torch_args:]
            name = rest[0] if rest else name
        self._init_mx(mx_specs, name)

    doc = f"``torch.nn.{base.__name__}`` taking ``mx_specs`` (None: the plain module) and ``name``."
    return type(base.__name__, (MxSpecsMixin, base), {"__init__": __init__, "forward": forward, "__doc__": doc,
                                                      "__module__": forward.__module__})
