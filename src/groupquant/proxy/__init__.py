"""Proxies: build a quantizer from a layer's keywords and apply it to one tensor."""
from .act import ActQuantProxy
from .base import QuantProxy, resolve_quantizer
from .bias import BiasQuantProxy
from .weight import WeightQuantProxy

__all__ = ["ActQuantProxy", "BiasQuantProxy", "QuantProxy", "WeightQuantProxy", "resolve_quantizer"]
