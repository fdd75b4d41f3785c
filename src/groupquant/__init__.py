"""groupquant: declarative group-wise (OCP MX) quantization for PyTorch."""

__version__ = "0.1.0"
