"""C++/CUDA sources of the native kernels (built just in time by groupquant.ops.native); no Python code."""
