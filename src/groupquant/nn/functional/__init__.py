"""The functional-quantization mode: a model's functional calls (matmul, attention,
``F.linear``, element-wise ops) quantized through a ``TorchFunctionMode``
(``functional_mode.py``), the quantizers it applies (``functional_quantizers.py``) and the
element-wise calls it maps (``elementwise_calls.py``)."""
