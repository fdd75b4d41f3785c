"""What every quant layer shares: its proxies, keyword routing, quant_weight()/quant_bias(), and the
quant-layer protocol's methods (``weight_spec``, ``set_weight``, ``gemm_op``, ``quant_gemm``; finding
the layers of a model is :mod:`groupquant.nn.layers.quant_layers`)."""
from __future__ import annotations

import warnings

from typing import Any, Dict, Mapping, Optional, Union

import torch

from ...core import QuantSpec
from ...inject import ConfigError
from ...ops import GroupQuantized
from ...proxy import ActQuantProxy, BiasQuantProxy, WeightQuantProxy
from ...quant_tensor import QuantTensor, plain
from ..gemm.backward_gemm import TOKEN_GROUPS, GemmBackward, gemm_forward, quant_gemm
from ..gemm.gemm_op import GemmOp, autocast_enabled
from ..gemm.gemm_rounding import GemmRounding, check_gemm_rounding, round_operand
from .group_quantized_weight import group_quantized_weight
from ..gemm.grad_slots import GRAD_SLOTS, backprop_enabled, backward_operands, build_backward_operands, grad_slot_prefixes
from .keywords import route_keywords
from .inside import in_quant_layer
from .input_rotation import MATRIX_KEY, ROTATION_ATTR, InputRotation, LearnedInputRotation
from ..gemm.lean_gemm import lean_applies, lean_quant_gemm

__all__ = ["QuantLayerMixin"]


_OWN = object()  # "the layer's own bias" (None is a real value: no bias)


class QuantLayerMixin:
    """Mixed into a torch layer (first base). Sets ``weight_quant``, ``bias_quant``,
    ``input_quant``, ``output_quant`` proxies (identity where the quantizer is None).

    ``return_quant_tensor``: return the output quant tensor (when ``output_quant`` is set)
    instead of a plain tensor.

    Memory in training: with a dynamic (abs-max, MX) weight quantizer and the identity STE, a
    weight layer runs the memory-lean configuration of :mod:`groupquant.nn.gemm.backward_gemm`
    (:mod:`groupquant.nn.gemm.lean_gemm`), whose backward frees the
    fake-quantized weight before the weight gradient is allocated (peak memory near a float
    layer's, same results bit for bit). Set ``memory_lean_backward = False`` on the layer (or the
    class) for the plain autograd path. The lean backward keeps the fake-quantized weight from the
    forward; ``recompute_quantized_weight = True`` makes it again from the weight in backward
    instead (one more weight fake-quant a step, the same bits): no quantized weight stays alive
    between a layer's forward and its backward, which in a deep network is a quantized copy of
    every weight at the end of the forward.

    Backward quantization (layers with a weight): the keywords ``grad_output_quant``,
    ``weight_quant_for_grad_input``, ``grad_output_quant_for_grad_weight``,
    ``input_quant_for_grad_weight`` and ``quantize_backprop`` (see :mod:`groupquant.nn.gemm.grad_slots`)
    quantize each operand of each backward GEMM from its high-precision tensor, grouped along that
    GEMM's reduction dim (:mod:`groupquant.nn.gemm.backward_gemm`).

    Layers with a weight also take ``gemm_rounding`` (a :class:`groupquant.nn.GemmRounding`: the
    element-wise roundings of the operands, the output and the gradients, :mod:`groupquant.nn.gemm.gemm_rounding`)
    and ``grad_weight_groups`` (``"tokens"``, default, or ``"sequence"``: the grad-weight GEMM's
    operands grouped along dim -2 of the input as given, :data:`~groupquant.nn.gemm.backward_gemm.TOKEN_GROUPS`).
    """

    memory_lean_backward: bool = True
    recompute_quantized_weight: bool = False
    quantize_backprop: bool = False
    gemm_rounding: Optional[GemmRounding] = None
    grad_weight_groups: str = "tokens"
    #: True for a layer that is handed its weight at each call (the functional mode's
    #: ``FunctionalLinear`` / ``FunctionalConv``): it holds quantizers, not a weight of the model.
    borrows_weight: bool = False

    # --- the quant-layer protocol (read by calibration, export, the LLM tools, the all-gather) ----
    @property
    def weight_spec(self) -> Optional[QuantSpec]:
        """The weight quantizer's resolved spec (None: a float weight, or a layer without one)."""
        proxy = self._modules.get("weight_quant")  # type: ignore[attr-defined]
        return None if proxy is None else proxy.spec

    @torch.no_grad()
    def set_weight(self, weight: torch.Tensor) -> None:
        """Copy ``weight`` into the layer's weight (cast to its dtype, on its device) and drop what
        was cached from the old one (the eval weight cache). ValueError naming the layer when the
        shapes differ."""
        own: torch.Tensor = self.weight  # type: ignore[attr-defined]
        if tuple(weight.shape) != tuple(own.shape):
            raise ValueError(f"{type(self).__name__}.set_weight: weight of shape {tuple(weight.shape)} for a layer "
                             f"whose weight is {tuple(own.shape)}")
        own.copy_(weight.detach().to(device=own.device, dtype=own.dtype))
        proxy = self._modules.get("weight_quant")  # type: ignore[attr-defined]
        if isinstance(proxy, WeightQuantProxy):
            proxy.clear_cache()

    def gemm_op(self) -> GemmOp:
        """The GEMM this layer's forward computes (:class:`~groupquant.nn.gemm.gemm_op.GemmOp`); each weight layer names its own."""
        raise NotImplementedError(f"{type(self).__name__} does not name its GEMM (gemm_op)")

    def quant_gemm(self, x: Union[torch.Tensor, QuantTensor], weight: Optional[torch.Tensor] = None, *,
                   bias: Any = _OWN) -> Union[torch.Tensor, QuantTensor]:
        """The layer's quantized GEMM on ``x`` (batched), with ``weight`` in place of its own when
        given and ``bias`` in place of its own when given (None: no bias): the forward's one route
        (:meth:`_quant_gemm`: input, weight, bias and output quantizers, the online rotation, the
        backward slots). ``layer.quant_gemm(x)`` equals ``layer(x)`` for batched input."""
        return self._quant_gemm(x, self.gemm_op(), weight, bias)

    def _init_quant(self, *, weight_quant: Optional[type] = None, bias_quant: Optional[type] = None,
                    input_quant: Optional[type] = None, output_quant: Optional[type] = None,
                    feature_dim: int = -1, return_quant_tensor: bool = False, has_weight: bool = True,
                    quant_kwargs: Mapping[str, Any]) -> None:
        """Build the proxies from the quantizers and the prefixed keywords in ``quant_kwargs``."""
        context = type(self).__name__
        quant_kwargs = dict(quant_kwargs)
        slots = {name: quant_kwargs.pop(name) for name in GRAD_SLOTS if name in quant_kwargs} if has_weight else {}
        backprop = quant_kwargs.pop("quantize_backprop", None) if has_weight else None
        rounding = quant_kwargs.pop("gemm_rounding", None) if has_weight else None
        token_groups = quant_kwargs.pop("grad_weight_groups", "tokens") if has_weight else "tokens"
        quants: Dict[str, Optional[type]] = {"input_": input_quant, "output_": output_quant}
        if has_weight:
            quants.update({"weight_": weight_quant, "bias_": bias_quant})
            quants.update(grad_slot_prefixes({name: slots.get(name) for name in GRAD_SLOTS}))
        routed = route_keywords(quant_kwargs, quants, context)
        if not isinstance(return_quant_tensor, bool):
            raise TypeError(f"{context}: return_quant_tensor must be True or False, got {return_quant_tensor!r}")
        self.return_quant_tensor = return_quant_tensor
        self.input_quant = ActQuantProxy(input_quant, "input_", feature_dim, routed["input_"], context)
        self.output_quant = ActQuantProxy(output_quant, "output_", feature_dim, routed["output_"], context)
        if has_weight:
            weight: torch.Tensor = self.weight  # type: ignore[attr-defined]
            bias: Optional[torch.Tensor] = self.bias  # type: ignore[attr-defined]
            self.weight_quant = WeightQuantProxy(weight_quant, weight.shape, routed["weight_"], context)
            if bias is None and (bias_quant is not None or routed["bias_"]):
                raise ValueError(f"{context}: bias_quant / bias_* settings given but the layer has bias=False")
            self.bias_quant = BiasQuantProxy(bias_quant, bias.shape if bias is not None else (0,),
                                             routed["bias_"] if bias is not None else {}, context)
            self._init_backward(slots, backprop, routed, context)
            self._init_rounding(rounding, token_groups, context)
            if weight.device.type != "cpu":  # quantizer state (learned scales, running stats) beside the weight
                for proxy in (self.weight_quant, self.bias_quant, self.input_quant, self.output_quant):
                    proxy.to(weight.device)
            self.weight_quant.init_learned_scales(weight)  # (learned scales start from the weight)


    def _init_backward(self, slots: Mapping[str, Any], backprop: Optional[bool],
                       routed: Mapping[str, Mapping[str, Any]], context: str) -> None:
        """The backward proxies (registered as submodules) when backward quantization is on."""
        enabled = backprop_enabled(slots, backprop, context)
        given_keywords = [p for p, _ in GRAD_SLOTS.values() if routed.get(p)]
        if not enabled:
            if given_keywords:
                raise ConfigError(given_keywords[0], f"{context}: {given_keywords[0]}* settings given but backward "
                                                     "quantization is off (quantize_backprop=False)")
            self.quantize_backprop = False
            return
        forward = {"weight_quant": self.weight_quant.quantizer, "input_quant": self.input_quant.quantizer}
        proxies = build_backward_operands(slots, forward, routed, context)
        problem = self._backward_layout_problem(proxies)
        if problem is not None:
            if backprop:  # asked for explicitly
                raise ConfigError("quantize_backprop", f"{context}: {problem}")
            warnings.warn(f"{context}(groups={getattr(self, 'groups', 1)}, padding_mode="
                          f"{getattr(self, 'padding_mode', 'zeros')!r}): {problem}; this layer's backward stays "
                          "straight through (quantize_backprop=False)", UserWarning, stacklevel=4)
            self.quantize_backprop = False
            return
        for name, proxy in proxies.items():
            setattr(self, name, proxy)
        self.quantize_backprop = True

    def _backward_layout_problem(self, proxies: Mapping[str, Any]) -> Optional[str]:
        """Why the quantized backward cannot run on this layer (None: it can): a block must lie
        inside one reduction. Zero padding only; a grouped convolution (``groups`` > 1) when every
        block of the grad-input GEMM's operands along the output channels (``grad_output_quant``
        along dim 1 of dY, ``weight_quant_for_grad_input`` along dim 0 of W) lies inside one
        group's ``out_channels / groups`` channels (the grad-weight GEMM reduces over the batch and
        positions, inside every group), unless the layer sets ``blocks_across_groups`` (those
        operands then quantized whole, as microxcaling's convolution does)."""
        groups = getattr(self, "groups", 1)
        if getattr(self, "padding_mode", "zeros") != "zeros":
            return "backward quantization needs zero padding"
        if groups == 1 or getattr(self, "blocks_across_groups", False):
            return None
        per_group = self.weight.shape[0] // groups  # type: ignore[attr-defined]  # O / groups
        for name in ("grad_output_quant", "weight_quant_for_grad_input"):
            spec = getattr(proxies.get(name), "spec", None)
            if spec is not None and spec.granularity == "group" and per_group % spec.group_size:
                return (f"backward quantization of a grouped convolution needs {name}'s groups of "
                        f"{spec.group_size} inside each group's {per_group} output channels (a block must lie "
                        "inside one reduction)")
        return None

    def _init_rounding(self, rounding: Any, token_groups: Any, context: str) -> None:
        """``gemm_rounding`` and ``grad_weight_groups`` checked against the backward set-up: output
        and gradient roundings and sequence groups run in the quantized backward."""
        self.gemm_rounding = check_gemm_rounding(rounding, self.quantize_backprop, context)
        if token_groups not in TOKEN_GROUPS:
            raise ConfigError("grad_weight_groups", f"{context}: grad_weight_groups must be one of {TOKEN_GROUPS}, "
                                                    f"got {token_groups!r}")
        if token_groups != "tokens" and not self.quantize_backprop:
            raise ConfigError("grad_weight_groups", f"{context}: grad_weight_groups={token_groups!r} groups the "
                                                    "quantized backward's operands: set quantize_backprop=True")
        self.grad_weight_groups = token_groups

    def quant_weight(self) -> Union[torch.Tensor, QuantTensor]:
        """The quantized weight: a quant tensor (``GroupwiseFloatQuantTensor`` for MXFP weights,
        ``GroupwiseIntQuantTensor`` for MXINT8 / int per group, ``Int/FloatQuantTensor`` per tensor
        or channel), or the float weight when ``weight_quant`` is None.

        For export (codes, scale codes, layout) read :meth:`group_quantized_weight` instead: the
        one accessor every export reader uses.
        """
        return self.weight_quant(self.weight)  # type: ignore[attr-defined]

    def group_quantized_weight(self, name: Optional[str] = None) -> "GroupQuantized":
        """The weight's element codes, scale codes, tensor scale, layout and format (a
        :class:`groupquant.ops.GroupQuantized`); ``WeightNotGroupQuantized`` (naming ``name`` or the
        class) when the weight is float or not group-wise. See :mod:`groupquant.nn.layers.group_quantized_weight`."""
        return group_quantized_weight(self, name)

    def quant_bias(self) -> Union[None, torch.Tensor, QuantTensor]:
        """The quantized bias (quant tensor), the float bias, or None without bias."""
        bias = self.bias  # type: ignore[attr-defined]
        return None if bias is None else self.bias_quant(bias)

    def _lean(self, qx: torch.Tensor, op: GemmOp, weight: torch.Tensor) -> bool:
        """Whether this call takes the memory-lean path: a training step (grad recorded, not
        traced for export, no autocast) whose weight quantizer lets it (see :func:`lean_applies`)."""
        if not self.memory_lean_backward or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            return False
        if autocast_enabled(qx.device.type):
            return False
        return lean_applies(self.weight_quant) and op.lean_supported(qx, weight)

    def _quant_gemm(self, x: Union[torch.Tensor, QuantTensor], op: GemmOp, weight: Optional[torch.Tensor] = None,
                    bias: Any = _OWN) -> Union[torch.Tensor, QuantTensor]:
        """``output_quant(op(input_quant(x), weight_quant(W), bias_quant(b)))``: one route for
        every weight layer; the lean path differs only in what backward keeps alive, the
        quantized-backward path in what the backward GEMMs compute. ``weight`` / ``bias``: the
        layer's own unless given (a functional ``F.linear`` borrows a layer's quantizers); an op
        that ``stores_weight`` (``PackedLinear``'s :class:`~groupquant.nn.gemm.packed_gemm_op.PackedGemmOp`) takes
        its packed weight as ``weight``, as it is (no weight quantizer; the op's own backward).
        The computation is marked (:func:`in_quant_layer`) only while a torch function mode is
        active (a functional-quantization mode is one; with none there is nobody to tell)."""
        params = self._parameters  # type: ignore[attr-defined]  # (without nn.Module.__getattr__)
        if weight is None:
            weight = params.get("weight", _OWN)
            weight = self.weight if weight is _OWN else weight  # type: ignore[attr-defined]  # (parametrized)
        if bias is _OWN:
            bias = params.get("bias", _OWN)
            bias = self.bias if bias is _OWN else bias  # type: ignore[attr-defined]
        if torch._C._len_torch_function_stack() == 0:
            return self._compute(x, op, weight, bias)
        with in_quant_layer():
            return self._compute(x, op, weight, bias)

    def _compute(self, x: Union[torch.Tensor, QuantTensor], op: GemmOp, weight: torch.Tensor,
                 bias: Optional[torch.Tensor]) -> Union[torch.Tensor, QuantTensor]:
        """:meth:`_quant_gemm`'s work. Without a gradient to record (eval, ``no_grad``) it is the
        proxies' ``quant_value`` (the weight's from the eval cache) and the op."""
        proxies = self._modules  # type: ignore[attr-defined]  # (the proxies, without nn.Module.__getattr__)
        rotation = proxies.get(ROTATION_ATTR)  # online rotation of the input (groupquant.calib.rotate_model)
        if rotation is not None:
            x = rotation(plain(x))
        rounding = self.gemm_rounding
        x_given, w_given = x, weight
        if rounding is not None:  # the operands rounded first (straight through); see .gemm_rounding
            x = round_operand(plain(x), rounding.input)
            weight, bias = round_operand(weight, rounding.weight), round_operand(bias, rounding.bias)
            if rounding.backward_operands == "rounded":
                x_given, w_given = x, weight
        qx = proxies["input_quant"].quant_value(x)
        bias_quant = proxies["bias_quant"]
        qb = bias if bias is None or bias_quant.tensor_quant is None else bias_quant.quant_value(bias)
        weight_quant = proxies["weight_quant"]
        if op.stores_weight:  # packed storage the op decodes (PackedLinear): no weight quantizer, its own backward
            y = gemm_forward(op, qx, weight, qb, rounding)
        elif not (torch.is_grad_enabled() and (weight.requires_grad or qx.requires_grad)):
            y = gemm_forward(op, qx, weight_quant.quant_value(weight), qb, rounding)
        elif self.quantize_backprop:
            plan = GemmBackward(op, backward_operands({name: getattr(self, name) for name in GRAD_SLOTS}),
                                rounding=rounding, token_groups=self.grad_weight_groups)
            y = quant_gemm(qx, weight_quant.quant_value(weight), qb, plain(x_given), w_given, plan)
        elif self._lean(qx, op, weight):
            y = lean_quant_gemm(qx, weight, qb, weight_quant, op,
                                keep_quantized_weight=not self.recompute_quantized_weight)
        else:
            y = op.forward(qx, weight_quant.quant_value(weight), qb)
        return y if proxies["output_quant"].tensor_quant is None else self._finish(y)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:
        """torch's loading; a state dict holding an input rotation (``input_rotation.block_size_``,
        and ``input_rotation.matrix`` for a learned one) gives the layer that rotation first, so a rotated model's state dict loads into a freshly
        converted model; a weight loaded without its learned scales sets them from it (children
        load after the layer: scales in the state dict still win)."""
        key = f"{prefix}{ROTATION_ATTR}.block_size_"
        learned = state_dict.get(f"{prefix}{ROTATION_ATTR}.{MATRIX_KEY}")
        if learned is not None and not isinstance(getattr(self, ROTATION_ATTR, None), LearnedInputRotation):
            setattr(self, ROTATION_ATTR, LearnedInputRotation(torch.empty(learned.shape)))  # (values load below)
        elif key in state_dict and getattr(self, ROTATION_ATTR, None) is None:
            setattr(self, ROTATION_ATTR, InputRotation(int(state_dict[key])))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)  # type: ignore[misc]
        proxy = self._modules.get("weight_quant")
        if isinstance(proxy, WeightQuantProxy) and proxy.learned_scales() and f"{prefix}weight" in state_dict:
            own = f"{prefix}weight_quant."
            if not any(key.startswith(own) for key in state_dict):  # a weight loaded without its scales
                proxy.init_learned_scales(self.weight)

    def _finish(self, y: torch.Tensor) -> Union[torch.Tensor, QuantTensor]:
        """Apply ``output_quant`` and unwrap unless ``return_quant_tensor``."""
        if self.output_quant.tensor_quant is None:
            return y
        out = self.output_quant(y)
        return out if self.return_quant_tensor else plain(out)
