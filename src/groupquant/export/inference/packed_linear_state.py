"""PackedLinearState: everything a :class:`~.packed_linear.PackedLinear` holds besides its
quantizers, as one frozen record.

- ``kernel``: the kernel's view of the packed weight (:class:`groupquant.ops.packed_gemm.PackedWeight`):
  the element-code stream (uint8, row-major ``[N, k, B]`` codes at their bits, least significant
  bit first: the :class:`groupquant.packing.PackedTensor` layout), the scale bytes (uint8
  ``[N, k]``), the two float32 decoding tables and the parameter record, whose ``global_scale`` is
  the tensor scale's value when the record was made;
- ``tensor_scale``: NVFP4's per-tensor float32 scale ``g`` (0-d; None without one);
- ``bias``: float32 ``[N]`` or None;
- ``tensor_scale_version``: the tensor scale's version counter when the record was made.

The layer keeps one record and hands ``kernel`` to the GEMM as it is: nothing is assembled or
checked per call but the tensor scale's version (NVFP4 only). Anything that changes a tensor of
the record (``.to``, a state-dict load, ``load_packed``, assigning ``layer.weight_codes = ...``)
makes a new record with :meth:`PackedLinearState.replace`; an in-place change of the codes, scale
bytes or bias is seen by the kernel as it is (the same tensors), one of the tensor scale by
:meth:`PackedLinearState.current` (the kernel takes ``g`` as a number in its parameter record).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from ...ops.packed_gemm import PackedWeight
from ...ops.packed_gemm_params import PackedGemmParams

__all__ = ["PackedLinearState", "STATE_KEYS"]

#: state-dict entry -> record tensor, in the order the entries are written (that of the buffers
#: PackedLinear had before the record: saved files keep their keys and order)
STATE_KEYS = {"weight_codes": "codes", "weight_scale": "scale", "bias": "bias", "weight_tensor_scale": "tensor_scale"}


@dataclass(frozen=True)
class PackedLinearState:
    """A packed linear layer's weight, tensor scale and bias (see the module docstring)."""

    kernel: PackedWeight
    tensor_scale: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]
    tensor_scale_version: int

    @classmethod
    def make(cls, codes: torch.Tensor, scale: torch.Tensor, value_table: torch.Tensor, scale_table: torch.Tensor,
             params: PackedGemmParams, tensor_scale: Optional[torch.Tensor],
             bias: Optional[torch.Tensor]) -> "PackedLinearState":
        """The record of these tensors; ``params`` takes the tensor scale's present value (its
        ``has_global_scale`` must already say whether there is one)."""
        if tensor_scale is not None:
            params = dataclasses.replace(params, global_scale=float(tensor_scale))
        kernel = PackedWeight(codes, scale, value_table, scale_table, params)
        return cls(kernel, tensor_scale, bias, -1 if tensor_scale is None else tensor_scale._version)

    def tensors(self) -> Dict[str, Optional[torch.Tensor]]:
        """Every tensor of the record by name (the keywords of :meth:`replace`)."""
        k = self.kernel
        return {"codes": k.data, "scale": k.scale, "value_table": k.value_table, "scale_table": k.scale_table,
                "tensor_scale": self.tensor_scale, "bias": self.bias}

    def replace(self, **tensors: Optional[torch.Tensor]) -> "PackedLinearState":
        """A new record with the named tensors replaced (none: the same tensors, the tensor scale read again)."""
        now = self.tensors()
        now.update(tensors)
        return PackedLinearState.make(params=self.kernel.params, **now)  # type: ignore[arg-type]

    def map(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> "PackedLinearState":
        """A new record of ``fn`` applied to every tensor (``Module._apply``'s functions: ``.to``, ``.cuda``, ...)."""
        return self.replace(**{n: None if t is None else fn(t) for n, t in self.tensors().items()})

    def current(self) -> "PackedLinearState":
        """This record, or (the tensor scale changed in place since it was made) a new one holding its value."""
        ts = self.tensor_scale
        if ts is None or ts._version == self.tensor_scale_version:
            return self
        return self.replace()

    def entries(self) -> Dict[str, Optional[torch.Tensor]]:
        """The state-dict entries (:data:`STATE_KEYS`: ``weight_codes``, ``weight_scale``, ``bias``,
        ``weight_tensor_scale``), None where the layer has no such tensor."""
        tensors = self.tensors()
        return {key: tensors[name] for key, name in STATE_KEYS.items()}

    @property
    def nbytes(self) -> int:
        """Bytes of the state: code stream, scale bytes, bias and tensor scale (not the decoding tables)."""
        return sum(t.numel() * t.element_size() for t in self.entries().values() if t is not None)
