"""The quant layers and the quant-layer protocol: ``QuantLinear``, ``QuantConv1d/2d/3d``,
``QuantMatMul``, ``QuantIdentity`` / ``QuantReLU``, the mixin every layer is built on
(``quant_layer.py``), finding a model's quant layers, keyword routing, the online input
rotation, the group-quantized weight accessor, and the regions the functional mode leaves
alone. The public names are exported by :mod:`groupquant.nn`."""
