"""PackedLinear: an inference linear layer that holds only its packed weight and its bias.

``PackedLinear.from_quant_linear(layer)`` takes a :class:`~groupquant.nn.QuantLinear` whose weight
quantizer is group-wise with byte-coded scales (the MX formats MXFP4, MXFP6, MXFP8, MXINT8 with
E8M0 scales, NVFP4 with UE4M3 scales and its per-tensor scale, other integer / minifloat widths up
to 8 bits in blocks, E{k}M0 or other minifloat scales) and keeps one frozen record, :class:`~.packed_linear_state.PackedLinearState` (``layer.state``):

- the kernel's view of the packed weight (:class:`groupquant.ops.packed_gemm.PackedWeight`): the
  element codes at their bits, one uint8 stream (row-major ``[N, k, B]``, least significant bit
  first: the :class:`groupquant.packing.PackedTensor` layout), one scale byte per block (uint8
  ``[N, k]``: E8M0, UE4M3, ...: ``scale_format``), the decoding tables and the parameter record;
- NVFP4's per-tensor float32 scale ``g`` (0-d; absent without one), which the kernel multiplies
  after the block scale: ``W = (q * s) * g``;
- the float32 bias;

and the layer's quantizer proxies (``input_quant``, ``bias_quant``, ``output_quant``, and
``weight_quant`` only to rebuild the trainable layer: it holds no weight). ``weight_codes``,
``weight_scale``, ``weight_tensor_scale`` and ``bias`` read the record's tensors (assigning one makes
a new record); they are the layer's state-dict entries, as they were when they were buffers.

It is a quant layer (:class:`groupquant.nn.QuantLayerMixin`) whose weight comes from packed
storage: ``forward`` is the quant layers' one route (``QuantLayerMixin._quant_gemm``: online
rotation, ``output_quant(F.linear(input_quant(x), W, bias_quant(b)))`` with the layer's proxies,
the ``return_quant_tensor`` tail) with a :class:`~groupquant.nn.gemm.packed_gemm_op.PackedGemmOp`,
whose weight is the packed storage, decoded inside the kernel
(:func:`groupquant.ops.packed_gemm.packed_linear`), so it equals the fake-quant layer up to
float32 summation order. ``group_quantized_weight()`` reads the packed storage back (codes and
scale bytes bit for bit); ``quant_weight()`` is its group-wise quant tensor.

Backward: the input gets its gradient ``dY @ W`` (float32 accumulation;
:mod:`groupquant.nn.gemm.packed_gemm_op`), the packed weight none. Dtypes: the state stays float32 /
bytes whatever ``.to(dtype)`` / ``.half()`` / ``.bfloat16()`` say (those set the dtype the weight
is dequantized to); inputs may be float32, bfloat16 or float16. An in-place change of the
record's tensors (``layer.weight_tensor_scale.mul_(2)``, ``layer.weight_codes.copy_(...)``) is seen by
the next forward. ``to_quant_linear()`` is the way back: a trainable ``QuantLinear`` with the dequantized
weight and the same quantizers.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Union

import torch
from torch import nn

from ...core import QuantSpec
from ...formats import ElementFormat
from ...nn import QuantLayerMixin, QuantLinear
from ...nn.layers.input_rotation import InputRotation
from ...nn.layers.group_quantized_weight import WeightNotGroupQuantized
from ...nn.gemm.packed_gemm_op import PackedGemmOp
from ...ops import FakeQuantResult, GroupLayout, GroupQuantized
from ...ops.packed_gemm import PACKED_INPUT_DTYPES, PackedWeight
from ...ops.packed_gemm_params import packed_gemm_params
from ...ops.packed_tables import element_value_table, scale_table
from ...packing import PackedTensor, element_storage_dtype, is_byte_format, pack, scale_storage_dtype
from ...proxy import ActQuantProxy, BiasQuantProxy, QuantProxy, WeightQuantProxy
from ...quant_tensor import QuantTensor, quant_tensor_from_output
from ..errors import PackError
from .packable import check_packable
from .packed_linear_state import STATE_KEYS, PackedLinearState

__all__ = ["PackedLinear", "PackError"]


def _target_dtype(fn: Callable[[torch.Tensor], torch.Tensor], device: torch.device) -> Optional[torch.dtype]:
    """The float dtype a ``Module._apply`` function casts floating tensors to, or None when it keeps dtypes."""
    probes = [fn(torch.zeros((), dtype=d, device=device)).dtype for d in (torch.float32, torch.float16)]
    return None if probes == [torch.float32, torch.float16] else probes[0]


def _keeping_dtype(fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    """``fn`` (a ``Module._apply`` function) that moves a tensor but never changes its dtype: the
    record's float32 bias, tensor scale and tables stay float32 (a cast would round them; the
    kernel reads them so), its bytes stay bytes."""
    def apply(t: torch.Tensor) -> torch.Tensor:
        moved = fn(t)
        return moved if moved.dtype == t.dtype else t.to(moved.device)
    return apply


def _state_tensor(key: str, doc: str) -> property:
    """The layer attribute ``key`` (a state-dict entry) onto the record's tensor; assigning a tensor
    of the same shape and dtype makes a new record (the next forward uses it)."""
    name = STATE_KEYS[key]

    def get(self: "PackedLinear") -> Optional[torch.Tensor]:
        return self._state.tensors()[name]

    def set_(self: "PackedLinear", value: torch.Tensor) -> None:
        now = get(self)
        if now is None or not isinstance(value, torch.Tensor) or value.shape != now.shape or value.dtype != now.dtype:
            want = "nothing (the layer has none)" if now is None else f"{now.dtype} of shape {tuple(now.shape)}"
            got = f"{value.dtype} of shape {tuple(value.shape)}" if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"{self.layer_name}: PackedLinear.{key} takes {want}, got {got}")
        self._state = self._state.replace(**{name: value})

    return property(get, set_, doc=doc)


class PackedLinear(QuantLayerMixin, nn.Module):
    """Inference linear layer on packed group-wise weights (see the module docstring).

    Build it with :meth:`from_quant_linear` (``groupquant.pack_model`` does it for a whole model)
    or :meth:`from_packed` (a :class:`PackedTensor`, e.g. from a gpt-oss MXFP4 checkpoint).
    Input: float32, bfloat16 or float16, ``[..., in_features]``; output in the input's dtype.
    """

    weight_codes = _state_tensor("weight_codes", "uint8 code stream (row-major ``[N, k, B]`` codes at their bits)")
    weight_scale = _state_tensor("weight_scale", "uint8 ``[N, k]``: one scale byte per block (``scale_format``)")
    weight_tensor_scale = _state_tensor("weight_tensor_scale", "float32 0-d per-tensor scale (NVFP4), or None")
    bias = _state_tensor("bias", "float32 ``[N]``, or None")

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
        self._gemm_op = PackedGemmOp(layer_name=name)  # the GEMM on the packed weight (the input dtype check)
        self.scale_format = packed.scale_format
        ts = packed.tensor_scale
        params = packed_gemm_params(self.fmt, self.out_features, self.in_features, self.block_size,
                                    has_global_scale=ts is not None)
        self._state = PackedLinearState.make(
            codes=packed.data.reshape(-1).view(torch.uint8).clone(),
            scale=packed.scale.view(torch.uint8).reshape(self.out_features, -1).clone(),
            value_table=element_value_table(self.fmt).to(packed.data.device),  # the tables on the codes' device
            scale_table=scale_table(self.scale_format).to(packed.data.device), params=params,
            tensor_scale=None if ts is None else ts.detach().float().reshape(()).clone(),
            bias=None if bias is None else bias.detach().float().clone())
        proxies = dict(proxies or {})
        bias_shape = (self.out_features,) if bias is not None else (0,)
        defaults = {"weight_quant": lambda: WeightQuantProxy(None, (self.out_features, self.in_features), None, name),
                    "bias_quant": lambda: BiasQuantProxy(None, bias_shape, None, name),
                    "input_quant": lambda: ActQuantProxy(None, "input_", -1, None, name),
                    "output_quant": lambda: ActQuantProxy(None, "output_", -1, None, name)}
        for attr, make in defaults.items():
            setattr(self, attr, proxies.pop(attr, None) or make())
        for attr, proxy in proxies.items():  # backward-GEMM slots of the layer it came from, kept for the way back
            setattr(self, attr, proxy)

    @property
    def state(self) -> PackedLinearState:
        """The layer's one record: the kernel's view of the packed weight, the tensor scale and the bias."""
        return self._state

    # ---- torch's module machinery: state dict and .to() on the record -------------------------

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:
        """The record's tensors under their keys (``weight_codes``, ``weight_scale``, ``bias``,
        ``weight_tensor_scale``: the keys and order of the buffers the layer had before the record)."""
        for key, t in self._state.entries().items():
            if t is not None:
                destination[prefix + key] = t if keep_vars else t.detach()
        super()._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs) -> None:
        """The quant layers' state-dict loading (:class:`~groupquant.nn.QuantLayerMixin`: an input
        rotation in the state dict is attached first), then the record's entries: copied into its
        tensors (``load_state_dict(..., assign=True)``: put in their place) and a new record made
        (it holds the per-tensor scale's value). Missing entries and shape mismatches are reported
        as torch reports them for buffers."""
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)
        assign = local_metadata.get("assign_to_params_buffers", False)
        placed: Dict[str, torch.Tensor] = {}
        for key, t in self._state.entries().items():
            full = prefix + key
            if t is None:
                continue
            if full in unexpected_keys:  # torch's base method knows only buffers and parameters
                unexpected_keys.remove(full)
            if full not in state_dict:
                missing_keys.append(full)
                continue
            value = state_dict[full]
            if not isinstance(value, torch.Tensor) or value.shape != t.shape:
                error_msgs.append(f"size mismatch for {full}: copying a param with shape "
                                  f"{tuple(getattr(value, 'shape', ()))} from checkpoint, the shape in current model "
                                  f"is {tuple(t.shape)}.")
            elif assign:
                placed[STATE_KEYS[key]] = value.detach().to(t.dtype)
            else:
                with torch.no_grad():
                    t.copy_(value)
        self._state = self._state.replace(**placed)

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor], recurse: bool = True) -> "PackedLinear":
        """``Module._apply`` (``.to``, ``.cuda``, ``.half``, ...) on the quantizer proxies and on the
        record, whose tensors move but keep their dtypes (float32 bias, tensor scale and tables: the
        kernel reads them so); a float dtype it asks for becomes the dtype the weight dequantizes to."""
        dtype = _target_dtype(fn, self.weight_codes.device)
        if dtype is not None and dtype not in PACKED_INPUT_DTYPES:
            raise TypeError(f"{self.layer_name}: PackedLinear dequantizes to {[str(d) for d in PACKED_INPUT_DTYPES]}, "
                            f"got a cast to {dtype}")
        super()._apply(fn, recurse)
        self._state = self._state.map(_keeping_dtype(fn))
        if dtype is not None:
            self.weight_dtype = dtype
        return self

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_quant_linear(cls, layer: QuantLinear, name: str = "QuantLinear") -> "PackedLinear":
        """The packed form of ``layer`` (its :meth:`~groupquant.nn.QuantLayerMixin.group_quantized_weight`);
        PackError (naming ``name`` and the setting) unless its weight quantizer is group-wise with
        byte-coded scales (E8M0, UE4M3, ...)."""
        try:
            q = layer.group_quantized_weight(name)
        except WeightNotGroupQuantized as e:
            raise PackError(str(e)) from None
        packed = pack(q)
        layer.weight_quant.clear_cache()  # the packed layer keeps the quantizer, never a float weight
        proxies = {n: m for n, m in layer.named_children() if isinstance(m, (QuantProxy, InputRotation))}
        return cls(packed, layer.bias, name=name, proxies=proxies, return_quant_tensor=layer.return_quant_tensor)

    @classmethod
    def from_packed(cls, packed: PackedTensor, bias: Optional[torch.Tensor] = None, *,
                    input_quant: Union[None, type, nn.Module] = None, name: str = "PackedLinear") -> "PackedLinear":
        """A layer on ``packed`` (``[out, in]`` grouped along ``in``), optionally quantizing its input
        (an input quantizer class, or an ``ActQuantProxy``)."""
        if isinstance(input_quant, type):
            input_quant = ActQuantProxy(input_quant, "input_", -1, None, name)
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

    def group_quantized_weight(self, name: Optional[str] = None) -> GroupQuantized:
        """The weight's codes, scale codes, tensor scale, layout and format, from packed storage (bit for bit)."""
        return self.packed_weight().unpack()

    def quant_weight(self) -> QuantTensor:
        """The weight as a group-wise quant tensor (values dequantized from packed storage)."""
        q = self.group_quantized_weight()
        value = q.layout.contract(q.dequantize())
        return quant_tensor_from_output(FakeQuantResult(value, q.scale, q.layout, q.tensor_scale), self._spec())

    def _spec(self) -> QuantSpec:
        """The weight quantizer's spec, or (a layer read from a checkpoint) one describing the packed format."""
        spec = self.weight_quant.spec
        if spec is not None:
            return spec
        sf = self.scale_format
        return QuantSpec(f"packed {self.fmt.name}", self.fmt, group_size=self.block_size, group_dim=1,
                         restrict="power_of_two" if sf.is_power_of_two else "fp", scale_format=sf,
                         tensor_scale=self.weight_tensor_scale is not None)

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
        self._state = self._state.replace()  # a new record: the kernel's view with the tensor scale's value

    def dequantized_weight(self) -> torch.Tensor:
        """The decoded weight ``[out, in]`` in the original dtype (equal to the fake-quant weight)."""
        return self.packed_weight().dequantize()

    def _current_state(self) -> PackedLinearState:
        """The record, made again first if the tensor scale was changed in place (the kernel takes
        its value in the record); under ``torch.compile`` the record as it is."""
        state = self._state
        if torch.compiler.is_compiling():
            return state
        fresh = state.current()
        if fresh is not state:
            self._state = fresh
        return fresh

    def _weight(self) -> PackedWeight:
        """The kernel's view of the weight: the record's, made when the record was."""
        return self._current_state().kernel

    @property
    def nbytes(self) -> int:
        """Bytes of the layer's state: packed codes, scale bytes, bias and tensor scale."""
        return self._state.nbytes

    # ---- forward and the way back ---------------------------------------------------------------

    def forward(self, x: Union[torch.Tensor, QuantTensor]) -> Union[torch.Tensor, QuantTensor]:
        """``output_quant(packed_linear(input_quant(x), W, bias_quant(b)))``: the quant-layer route
        (:meth:`~groupquant.nn.QuantLayerMixin._quant_gemm`) with the packed weight and its GEMM."""
        state = self._current_state()
        return self._quant_gemm(x, self._gemm_op, state.kernel, state.bias)

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
