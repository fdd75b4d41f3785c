"""ONNX export: :func:`~.model.export_onnx` writes a model as a graph that onnxruntime runs.

Imports nothing on its own, so ``groupquant.export`` imports without onnx; ``groupquant.export.export_onnx``
loads :mod:`.model` (and onnx) on first use.

- :mod:`.model`: the tracer and the graph it writes; :mod:`.builder`: the node/initializer builder;
- :mod:`.quant_layers`: quant layers (codes + blocked ``DequantizeLinear`` weights, dynamic activations);
- :mod:`.weight`, :mod:`.act_quant`, :mod:`.shared_scale`, :mod:`.element_round`: the quantizer rules as ONNX ops;
- :mod:`.torch_modules`, :mod:`.torch_functions`: float torch modules and functions.
"""
