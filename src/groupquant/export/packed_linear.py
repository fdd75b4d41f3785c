"""PackedLinear: an inference linear layer that holds only its packed weight and its bias.

``PackedLinear.from_quant_linear(layer)`` takes a :class:`~groupquant.nn.QuantLinear` whose weight
quantizer is group-wise with byte-coded scales (the MX formats MXFP4, MXFP6, MXFP8, MXINT8 with
E8M0 scales, NVFP4 with UE4M3 scales and its per-tensor scale, other integer / minifloat widths up
to 8 bits in blocks, E{k}M0 or other minifloat scales) and keeps:

- ``weight_codes``: the element codes at their bits, one uint8 stream (row-major ``[N, k, B]``,
  least significant bit first: the :class:`groupquant.packing.PackedTensor` layout);
- ``weight_scale``: one scale byte per block, uint8 ``[N, k]`` (E8M0, UE4M3, ...: ``scale_format``);
- ``weight_tensor_scale``: NVFP4's per-tensor float32 scale ``g`` (0-d; absent without one), which
  the kernel multiplies after the block scale: ``W = (q * s) * g``;
- ``bias`` and the layer's quantizer proxies (``input_quant``, ``bias_quant``, ``output_quant``,
  and ``weight_quant`` only to rebuild the trainable layer: it holds no weight).

``forward`` computes ``output_quant(F.linear(input_quant(x), W, bias_quant(b)))`` with ``W``
decoded inside the kernel (:func:`groupquant.ops.packed_gemm.packed_linear`), so it equals the
fake-quant layer up to float32 summation order. ``to_quant_linear()`` is the way back: a
trainable ``QuantLinear`` with the dequantized weight and the same quantizers.
"""
from __future__ import annotations

from typing import Dict, Optional, Union

import torch
from torch import nn

from ..formats import ElementFormat
from ..nn import QuantLinear
from ..nn.input_rotation import ROTATION_ATTR, InputRotation
from ..ops import GroupLayout
from ..ops.packed_gemm import PACKED_INPUT_DTYPES, PackedWeight, packed_linear
from ..ops.packed_gemm_params import packed_gemm_params
from ..ops.packed_tables import MAX_CODE_BITS, element_value_table, scale_table
from ..packing import PackedTensor, element_storage_dtype, is_byte_format, pack, scale_storage_dtype
from ..proxy import QuantProxy
from ..quant_tensor import QuantTensor, plain

__all__ = ["PackedLinear", "PackError"]

#: proxies a QuantLinear owns besides the four of the forward (backward-GEMM slots), kept as they are
_FORWARD_PROXIES = ("weight_quant", "input_quant", "bias_quant", "output_quant")


class PackError(ValueError):
    """A layer or packed weight that a packed inference layer cannot take (the message names both)."""


def check_packable(packed: PackedTensor, where: str) -> None:
    """PackError unless ``packed`` is a 2-D weight grouped along its input dim with byte-coded scales
    (E8M0, E{k}M0, UE4M3, ...) and codes of at most 8 bits whose blocks fill whole bytes."""
    if len(packed.shape) != 2 or packed.dim != 1:
        raise PackError(f"{where}: a packed linear weight is 2-D [out, in] grouped along dim 1 (in_features); "
                        f"got shape {tuple(packed.shape)} grouped along dim {packed.dim}")
    if not packed.scale_format.is_coded:
        raise PackError(f"{where}: the weight quantizer has float scales stored as {packed.scale_format.name} "
                        "values, not scale bytes; packed inference takes byte-coded scale formats (scale_format "
                        "e8m0 (MX), e{k}m0, ue4m3 (NVFP4), ...)")
    if packed.fmt.bit_width > MAX_CODE_BITS:
        raise PackError(f"{where}: packed inference takes element codes of at most {MAX_CODE_BITS} bits; "
                        f"the weight format {packed.fmt.name} has bit_width={packed.fmt.bit_width}")
    if packed.block_size * packed.fmt.bit_width % 8:
        raise PackError(f"{where}: a block of {packed.block_size} codes of {packed.fmt.bit_width} bits does not "
                        "fill whole bytes (group_size * bit_width must be a multiple of 8)")


class PackedLinear(nn.Module):
    """Inference-only linear layer on packed group-wise weights (see the module docstring).

    Build it with :meth:`from_quant_linear` (``groupquant.pack_model`` does it for a whole model)
    or :meth:`from_packed` (a :class:`PackedTensor`, e.g. from a gpt-oss MXFP4 checkpoint).
    Input: float32, bfloat16 or float16, ``[..., in_features]``; output in the input's dtype.
    """

    def __init__(self, packed: PackedTensor, bias: Optional[torch.Tensor] = None, *, name: str = "PackedLinear",
                 proxies: Optional[Dict[str, nn.Module]] = None, return_quant_tensor: bool = False) -> None:
        super().__init__()
        check_packable(packed, name)
        self.layer_name = name
        self.out_features, self.in_features = int(packed.shape[0]), int(packed.shape[1])
        self.fmt: ElementFormat = packed.fmt
        self.block_size = int(packed.block_size)
        self.weight_dtype = packed.dtype
        self.return_quant_tensor = return_quant_tensor
        self.register_buffer("weight_codes", packed.data.reshape(-1).view(torch.uint8).clone())
        self.register_buffer("weight_scale", packed.scale.view(torch.uint8).reshape(self.out_features, -1).clone())
        self.register_buffer("bias", None if bias is None else bias.detach().float().clone())
        self.scale_format = packed.scale_format
        ts = packed.tensor_scale
        self.register_buffer("weight_tensor_scale", None if ts is None else ts.detach().float().reshape(()).clone())
        self.register_buffer("value_table", element_value_table(self.fmt), persistent=False)
        self.register_buffer("scale_table", scale_table(self.scale_format), persistent=False)
        self.params = self._params()
        for attr, proxy in (proxies or {}).items():
            setattr(self, attr, proxy)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """torch's state-dict loading (an input rotation in the state dict is attached first, as
        :class:`~groupquant.nn.QuantLayerMixin` does), then the kernel record again (it holds the
        per-tensor scale)."""
        key = f"{prefix}{ROTATION_ATTR}.block_size_"
        if key in state_dict and getattr(self, ROTATION_ATTR, None) is None:
            setattr(self, ROTATION_ATTR, InputRotation(int(state_dict[key])))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self.params = self._params()

    def _params(self):
        """The kernel record (the per-tensor scale, if any, is part of it)."""
        ts = self.weight_tensor_scale
        return packed_gemm_params(self.fmt, self.out_features, self.in_features, self.block_size,
                                  global_scale=1.0 if ts is None else float(ts), has_global_scale=ts is not None)

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_quant_linear(cls, layer: QuantLinear, name: str = "QuantLinear") -> "PackedLinear":
        """The packed form of ``layer``; PackError (naming ``name`` and the setting) unless its weight
        quantizer is group-wise with byte-coded scales (E8M0, UE4M3, ...)."""
        proxy = getattr(layer, "weight_quant", None)
        if not isinstance(proxy, QuantProxy) or not proxy.is_quant_enabled:
            raise PackError(f"{name}: weight_quant is None (a float weight); packed inference needs a group-wise "
                            "weight quantizer (MX formats, integer groups)")
        with torch.no_grad():
            qt = layer.quant_weight()
        if not callable(getattr(qt, "to_group_quantized", None)):
            raise PackError(f"{name}: weight_quant={proxy.quantizer.__name__} is not group-wise "
                            f"({type(qt).__name__}); packed inference needs scaling_per_output=GROUP "
                            "(MX formats, integer groups)")
        packed = pack(qt)
        proxy.clear_cache()  # the packed layer keeps the quantizer, never a float weight
        proxies = {n: m for n, m in layer.named_children() if isinstance(m, (QuantProxy, InputRotation))}
        return cls(packed, layer.bias, name=name, proxies=proxies, return_quant_tensor=layer.return_quant_tensor)

    @classmethod
    def from_packed(cls, packed: PackedTensor, bias: Optional[torch.Tensor] = None, *,
                    input_quant: Optional[nn.Module] = None, name: str = "PackedLinear") -> "PackedLinear":
        """A layer on ``packed`` (``[out, in]`` grouped along ``in``), optionally quantizing its input."""
        return cls(packed, bias, name=name, proxies=None if input_quant is None else {"input_quant": input_quant})

    # ---- the packed weight ----------------------------------------------------------------------

    def packed_weight(self) -> PackedTensor:
        """The weight as a :class:`PackedTensor` (for packed state dicts; shares no memory)."""
        layout = GroupLayout.build(torch.Size((self.out_features, self.in_features)), 1, self.block_size)
        data = self.weight_codes.clone()
        if is_byte_format(self.fmt):
            data = data.view(element_storage_dtype(self.fmt)).view(layout.contracted_shape)
        scale = self.weight_scale.clone().view(scale_storage_dtype(self.scale_format))
        ts = None if self.weight_tensor_scale is None else self.weight_tensor_scale.clone()
        return PackedTensor(data, scale, self.fmt, layout, self.weight_dtype, self.scale_format, ts)

    def load_packed(self, packed: PackedTensor) -> None:
        """Replace the codes and scales by ``packed``'s; PackError names the layer and the setting that differs."""
        check_packable(packed, self.layer_name)
        if (packed.fmt != self.fmt or tuple(packed.shape) != (self.out_features, self.in_features)
                or packed.block_size != self.block_size):
            raise PackError(f"{self.layer_name}: packed weight of format {packed.fmt.name}, shape {tuple(packed.shape)}, "
                            f"block_size {packed.block_size} does not fit this layer (format {self.fmt.name}, shape "
                            f"{(self.out_features, self.in_features)}, block_size {self.block_size})")
        if packed.scale_format != self.scale_format or (packed.tensor_scale is None) != (self.weight_tensor_scale is None):
            raise PackError(f"{self.layer_name}: packed weight with scale_format {packed.scale_format.name} "
                            f"(tensor scale: {packed.tensor_scale is not None}) does not fit this layer (scale_format "
                            f"{self.scale_format.name}, tensor scale: {self.weight_tensor_scale is not None})")
        with torch.no_grad():
            self.weight_codes.copy_(packed.data.reshape(-1).view(torch.uint8))
            self.weight_scale.copy_(packed.scale.view(torch.uint8).reshape(self.out_features, -1))
            if packed.tensor_scale is not None:
                self.weight_tensor_scale.copy_(packed.tensor_scale.reshape(()))
        self.params = self._params()

    def dequantized_weight(self) -> torch.Tensor:
        """The decoded weight ``[out, in]`` in the original dtype (equal to the fake-quant weight)."""
        return self.packed_weight().dequantize()

    def _weight(self) -> PackedWeight:
        return PackedWeight(self.weight_codes, self.weight_scale, self.value_table, self.scale_table, self.params)

    @property
    def nbytes(self) -> int:
        """Bytes of the layer's state: packed codes, scale bytes and bias."""
        bias = 0 if self.bias is None else self.bias.numel() * self.bias.element_size()
        ts = 0 if self.weight_tensor_scale is None else 4
        return self.weight_codes.numel() + self.weight_scale.numel() + bias + ts

    # ---- forward and the way back ---------------------------------------------------------------

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        x = plain(x)
        if x.dtype not in PACKED_INPUT_DTYPES:
            raise TypeError(f"{self.layer_name}: packed inference takes input of dtype "
                            f"{[str(d) for d in PACKED_INPUT_DTYPES]}, got {x.dtype}")
        rotation = getattr(self, ROTATION_ATTR, None)  # the QuantLinear's online rotation (rotate_model)
        x = x if rotation is None else rotation(x)
        input_quant = getattr(self, "input_quant", None)
        qx = input_quant.quant_value(x) if input_quant is not None else x
        bias = self.bias
        bias_quant = getattr(self, "bias_quant", None)
        if bias is not None and bias_quant is not None:
            bias = plain(bias_quant.quant_value(bias)).float()
        y = packed_linear(qx, self._weight(), bias)
        output_quant = getattr(self, "output_quant", None)
        if output_quant is None or output_quant.tensor_quant is None:
            return y
        out = output_quant(y)
        return out if self.return_quant_tensor else plain(out)

    def to_quant_linear(self) -> QuantLinear:
        """A trainable QuantLinear: the dequantized weight (its fake-quant gives the same weight
        again), the bias, and this layer's quantizer proxies."""
        layer = QuantLinear(self.in_features, self.out_features, bias=self.bias is not None, dtype=self.weight_dtype,
                            device=self.weight_codes.device)
        with torch.no_grad():
            layer.weight.copy_(self.dequantized_weight())
            if self.bias is not None:
                layer.bias.copy_(self.bias)
        for attr, proxy in self.named_children():
            setattr(layer, attr, proxy)
        layer.return_quant_tensor = self.return_quant_tensor
        return layer

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
                f"format={self.fmt.name}, block_size={self.block_size}, scale_format={self.scale_format.name}"
                f"{', tensor_scale' if self.weight_tensor_scale is not None else ''}, nbytes={self.nbytes}")
