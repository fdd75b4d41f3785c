"""What a quant layer's GEMM computes: the op kinds (``gemm_op.py``; the packed-weight op in
``packed_gemm_op.py``), the one autograd function with its quantized backward
(``backward_gemm.py``) and its memory-lean form (``lean_gemm.py``), the backward slot table
(``grad_slots.py``) and the element-wise roundings around the GEMM (``gemm_rounding.py``).
Imports nothing of ``nn.layers``."""
