"""QuantProxy: builds a quantizer for one tensor of a layer and applies it.

The layer hands over its quantizer class (or None for float) and the keywords that carried the
proxy's prefix (``weight_bit_width=4`` arrives as ``bit_width=4``). The proxy checks them against
the quantizer's settings (an unknown name is a ValueError with a did-you-mean, naming the keyword
as the user typed it), fills in the layer's defaults where the quantizer leaves a dim to the
layer, builds the quant module (misconfiguration is reported here, naming the setting) and, on
each call, returns a quant tensor.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from ..inject import check_overrides, extend
from ..quant_tensor import QuantTensor, plain, quant_tensor_from_output
from ..quantizers import QuantizerBase

__all__ = ["QuantProxy", "proxy_settings"]


def proxy_settings(quant: Optional[type], overrides: Mapping[str, Any], context: str, prefix: str,
                   layer_defaults: Mapping[str, Any], forced: Mapping[str, Any]) -> Dict[str, Any]:
    """The settings the proxy adds to ``quant``: checked ``overrides``, ``forced`` values the user
    did not override, and the layer's defaults for settings the quantizer leaves None."""
    if quant is None:
        check_overrides(None, overrides, context, prefix=prefix)
        return {}
    if not (isinstance(quant, type) and issubclass(quant, QuantizerBase)):
        raise TypeError(f"{context}: {prefix}quant must be a quantizer class (e.g. groupquant.quantizers."
                        f"MXFloat8e4m3Weight) or None, got {quant!r}")
    check_overrides(quant, overrides, context, prefix=prefix)
    settings = {name: given for name, given in forced.items() if name not in overrides}
    settings.update(overrides)
    built = extend(quant, **settings) if settings else quant
    settings.update({name: given for name, given in layer_defaults.items()
                     if name not in settings and getattr(built, name) is None})
    return settings


class QuantProxy(nn.Module):
    """Applies one quantizer; ``forward`` returns a quant tensor (or its input when float).

    Attributes:
        quantizer: the resolved quantizer class (``groupquant.describe(proxy)`` shows it), or None;
            it is ``base_quantizer`` extended with ``settings``.
        tensor_quant: the core module doing the work (holds learned scales / running stats).
        fmt: the element format, or None.
    """

    prefix = ""

    def __init__(self, quant: Optional[type], overrides: Optional[Mapping[str, Any]] = None, context: str = "",
                 layer_defaults: Optional[Mapping[str, Any]] = None,
                 tensor_shape: Optional[Sequence[int]] = None, forced: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__()
        context = context or type(self).__name__
        settings = proxy_settings(quant, dict(overrides or {}), context, self.prefix, dict(layer_defaults or {}),
                                  dict(forced or {}))
        if quant is not None and tensor_shape is not None:
            settings["tensor_shape"] = tuple(int(s) for s in tensor_shape)
        self.base_quantizer = quant
        self.settings = settings
        self.quantizer = self._resolve()
        self.tensor_quant = self.quantizer.tensor_quant if self.quantizer is not None else None
        self.fmt = self.quantizer.element_format if self.quantizer is not None else None

    def _resolve(self) -> Optional[type]:
        """``base_quantizer`` with ``settings``."""
        if self.base_quantizer is None or not self.settings:
            return self.base_quantizer
        return extend(self.base_quantizer, **self.settings)

    def __getstate__(self) -> Dict[str, Any]:
        """Pickle the recipe (base quantizer + settings), not the derived class."""
        state = self.__dict__.copy()
        state.pop("quantizer", None)
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.quantizer = self._resolve()

    @property
    def is_quant_enabled(self) -> bool:
        return self.tensor_quant is not None

    def extra_repr(self) -> str:
        return f"quantizer={self.quantizer.__name__}" if self.quantizer is not None else "quantizer=None"

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        if self.tensor_quant is None:
            return x
        return quant_tensor_from_output(self.tensor_quant(plain(x)), self.fmt)
