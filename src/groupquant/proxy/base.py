"""QuantProxy: builds a quantizer for one tensor of a layer and applies it.

The layer hands over its quantizer class (or None for float) and the keywords that carried the
proxy's prefix (``weight_bit_width=4`` arrives as ``bit_width=4``). The proxy checks them against
the quantizer's settings (an unknown name is a ValueError with a did-you-mean, naming the keyword
as the user typed it), derives the variant ``Q.let(**overrides)`` (named for what differs),
takes its resolved :class:`groupquant.core.QuantSpec` (cached per class), fills in the dims the
layer gives this operand where the quantizer leaves them None, and builds the quant module from
that spec. On each call it returns a quant tensor (or only its value, :meth:`quant_value`).
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ..core import QuantSpec, build_tensor_quant
from ..inject import ConfigError, check_overrides
from ..ops import FakeQuantResult
from ..quant_tensor import QuantTensor, plain, quant_tensor_from_output
from ..quantizers import QuantizerMixin, quantizer_spec
from .gathered_weight import gathered_value, is_gathered

__all__ = ["QuantProxy", "resolve_quantizer"]

Dims = Tuple[Optional[int], Optional[int]]


def resolve_quantizer(quant: Optional[type], overrides: Mapping[str, Any], context: str,
                      prefix: str) -> Optional[type]:
    """``quant`` with the checked ``overrides`` (``quant.let(...)``), or None for float."""
    if quant is None:
        check_overrides(None, overrides, context, prefix=prefix)
        return None
    if not (isinstance(quant, type) and issubclass(quant, QuantizerMixin)) or "spec" not in quant.__dependencies__:
        raise TypeError(f"{context}: {prefix}quant must be a quantizer class (e.g. groupquant.quantizers."
                        f"MXFloat8e4m3Weight) or None, got {quant!r}")
    check_overrides(quant, overrides, context, prefix=prefix)
    return quant.let(**overrides) if overrides else quant


def _in_context(err: ConfigError, context: str, prefix: str) -> ConfigError:
    """``err`` with the layer and the keyword the user would type (``input_group_dim``)."""
    return ConfigError(prefix + err.setting, f"{context}: {err.problem}")


class QuantProxy(nn.Module):
    """Applies one quantizer; ``forward`` returns a quant tensor (or its input when float).

    Attributes:
        quantizer: the quantizer class (a ``let`` variant when keywords changed it), or None;
            ``groupquant.describe(proxy)`` shows it.
        spec: its resolved spec with this operand's dims, or None.
        tensor_quant: the core module doing the work (holds learned scales / running stats).
    """

    prefix = ""

    def __init__(self, quant: Optional[type], overrides: Optional[Mapping[str, Any]] = None, context: str = "",
                 layer_dims: Dims = (None, None), tensor_shape: Optional[Sequence[int]] = None,
                 force_dims: bool = False) -> None:
        super().__init__()
        self.context = context or type(self).__name__
        self.quantizer = resolve_quantizer(quant, dict(overrides or {}), self.context, self.prefix)
        self.spec: Optional[QuantSpec] = None
        self.tensor_quant: Optional[nn.Module] = None
        if self.quantizer is not None:
            try:
                self.spec = quantizer_spec(self.quantizer).with_dims(*layer_dims, force=force_dims)
                self.tensor_quant = build_tensor_quant(self.spec, tensor_shape)
            except ConfigError as err:
                raise _in_context(err, self.context, self.prefix) from None

    @property
    def fmt(self):
        """The element format, or None."""
        return None if self.spec is None else self.spec.fmt

    @property
    def is_quant_enabled(self) -> bool:
        return self.tensor_quant is not None

    def extra_repr(self) -> str:
        return f"quantizer={self.quantizer.__name__}" if self.quantizer is not None else "quantizer=None"

    def _run(self, x: torch.Tensor, contract: bool = True) -> FakeQuantResult:
        """The quant module on ``x``; a dim the tensor lacks is an error naming the keyword."""
        try:
            return self.tensor_quant(x, contract)
        except ConfigError as err:
            raise _in_context(err, self.context, self.prefix) from None

    def quant_value(self, x: Union[torch.Tensor, QuantTensor]) -> torch.Tensor:
        """The dequantized values of ``x`` (x's shape), the same computation as :meth:`forward`
        without the quant tensor around it; ``x`` itself when float."""
        tensor_quant = self._modules.get("tensor_quant")  # (a float proxy keeps None outside _modules)
        if tensor_quant is None:
            return plain(x)
        if is_gathered(x):  # gathered as codes under FSDP2 (groupquant.nn.enable_mx_all_gather): already quantized
            return gathered_value(x, self.spec, self.context)
        try:
            return tensor_quant(x.value if isinstance(x, QuantTensor) else x, False).value
        except ConfigError as err:
            raise _in_context(err, self.context, self.prefix) from None

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        if self.tensor_quant is None:
            return x
        return quant_tensor_from_output(self._run(plain(x)), self.spec, self.training)

    @torch.no_grad()
    def quantized(self, x: Union[torch.Tensor, QuantTensor]) -> QuantTensor:
        """The quant tensor of ``x`` holding what the quantize op returned where the quantizer runs
        it (abs-max group scales: the codes and scale codes themselves, the values equal to
        :meth:`forward`'s bit for bit); other quantizers' tensors as :meth:`forward` gives them.
        No gradient; no cache. ``x`` must be quantized (``is_quant_enabled``)."""
        try:
            out = self.tensor_quant(plain(x), True, True)
        except ConfigError as err:
            raise _in_context(err, self.context, self.prefix) from None
        return quant_tensor_from_output(out, self.spec, self.training)
