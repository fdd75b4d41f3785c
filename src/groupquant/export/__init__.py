"""Export: packed state dicts (storage form) and ONNX graphs that onnxruntime runs.

The ONNX parts need the ``export`` extra (``pip install groupquant[export]``: onnx, onnxruntime);
they are imported from their modules (``groupquant.export.onnx_weight``, ...) so that this
package imports without onnx.
"""
