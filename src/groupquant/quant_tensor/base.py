"""The behaviour every quant tensor shares: it stands for its dequantized value in torch code.

Any torch function given a quant tensor (``F.linear``, ``torch.matmul``, ``torch.cat``, ...)
receives its ``.value`` instead (the ``__torch_function__`` protocol); Python operators
(``+ - * / @ ** -x abs(x) x[i]`` and comparisons) and tensor attributes (``.shape``,
``.dtype``, ``.sum()``, ...) act on ``.value`` too, so gradients flow to whatever produced it.
``.detach()``, ``.to()``, ``.cpu()``, ``.cuda()`` and ``.clone()`` return a quant tensor of the
same kind with every tensor field converted (a dtype given to ``.to`` casts the value fields
only; scales stay float32 so they stay exact).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable, Dict

import torch

__all__ = ["QuantTensor", "plain"]

# Fields that hold values (cast by .to(dtype)); scale and zero-point fields keep their dtype.
_VALUE_FIELDS = ("value", "value_")


def plain(obj: Any) -> Any:
    """``obj`` with every quant tensor inside (lists, tuples, dicts) replaced by its value."""
    if isinstance(obj, QuantTensor):
        return obj.value
    if isinstance(obj, (list, tuple)):
        items = [plain(item) for item in obj]
        return type(obj)(items) if not hasattr(obj, "_fields") else type(obj)(*items)
    if isinstance(obj, dict):
        return {key: plain(item) for key, item in obj.items()}
    return obj


def _binary(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: "QuantTensor", other: Any) -> Any:
        return op(self.value, plain(other))
    return method


def _reflected(op: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def method(self: "QuantTensor", other: Any) -> Any:
        return op(plain(other), self.value)
    return method


class QuantTensor:
    """Base of the quant tensor dataclasses; subclasses provide ``value`` (a field or a
    property): the dequantized values in the original shape."""

    value: torch.Tensor  # annotation only (no default), so dataclass subclasses may declare the field

    def dequantize(self) -> torch.Tensor:
        """The dequantized values (same as :attr:`value`)."""
        return self.value

    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (), kwargs: Dict[str, Any] = None) -> Any:
        return func(*plain(args), **plain(kwargs or {}))

    # --- tensor-like attributes ---------------------------------------------------------------
    @property
    def shape(self) -> torch.Size:
        return self.value.shape

    @property
    def dtype(self) -> torch.dtype:
        return self.value.dtype

    @property
    def device(self) -> torch.device:
        return self.value.device

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def requires_grad(self) -> bool:
        return self.value.requires_grad

    def size(self, dim: int = None) -> Any:
        return self.shape if dim is None else self.shape[dim]

    def dim(self) -> int:
        return self.ndim

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, index: Any) -> torch.Tensor:
        return self.value[plain(index)]

    def __getattr__(self, name: str) -> Any:
        """Other tensor attributes and methods (``.sum()``, ``.view(...)``, ...) act on the value."""
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.value, name)

    # --- conversions that keep the quant tensor -----------------------------------------------
    def _map(self, fn: Callable[[str, torch.Tensor], torch.Tensor]) -> "QuantTensor":
        changes = {f.name: fn(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)
                   if isinstance(getattr(self, f.name), torch.Tensor)}
        return dataclasses.replace(self, **changes)

    def detach(self) -> "QuantTensor":
        return self._map(lambda name, t: t.detach())

    def clone(self) -> "QuantTensor":
        return self._map(lambda name, t: t.clone())

    def to(self, *args: Any, **kwargs: Any) -> "QuantTensor":
        device, dtype, non_blocking, _ = torch._C._nn._parse_to(*args, **kwargs)

        def convert(name: str, t: torch.Tensor) -> torch.Tensor:
            cast = dtype if name in _VALUE_FIELDS else None
            return t.to(device=device, dtype=cast, non_blocking=non_blocking)
        return self._map(convert)

    def cpu(self) -> "QuantTensor":
        return self.to("cpu")

    def cuda(self, device: Any = None) -> "QuantTensor":
        return self._map(lambda name, t: t.cuda(device))

    __hash__ = object.__hash__
    __add__, __radd__ = _binary(operator.add), _reflected(operator.add)
    __sub__, __rsub__ = _binary(operator.sub), _reflected(operator.sub)
    __mul__, __rmul__ = _binary(operator.mul), _reflected(operator.mul)
    __truediv__, __rtruediv__ = _binary(operator.truediv), _reflected(operator.truediv)
    __matmul__, __rmatmul__ = _binary(operator.matmul), _reflected(operator.matmul)
    __pow__, __rpow__ = _binary(operator.pow), _reflected(operator.pow)
    __eq__, __ne__ = _binary(operator.eq), _binary(operator.ne)  # type: ignore[assignment]
    __lt__, __le__ = _binary(operator.lt), _binary(operator.le)
    __gt__, __ge__ = _binary(operator.gt), _binary(operator.ge)

    def __neg__(self) -> torch.Tensor:
        return -self.value

    def __pos__(self) -> torch.Tensor:
        return self.value

    def __abs__(self) -> torch.Tensor:
        return self.value.abs()
