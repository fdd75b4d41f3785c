"""The schemes every device must compute alike (CPU, CUDA, the CUDA sources run on the CPU):
the MX formats, NVFP4 two- and single-level, the other scale formats and power-of-two rules,
non-saturating minifloats, each as (format, keywords of ``make_spec``); and the element roundings and input dtypes they run in.
Shared by tests/ops/test_device_parity.py and tests/csrc/test_cuda_kernels_emulated.py."""
from __future__ import annotations

import torch

SCHEMES = [("fp8_e4m3", {}), ("fp8_e5m2", {}), ("fp6_e3m2", {}), ("fp6_e2m3", {}), ("fp4_e2m1", {}),
           ("int8", {}), ("nvfp4", {}), ("nvfp4", {"tensor_scale": False}),
           ("fp4_e2m1", {"scale_mode": "float", "scale_format": "ue4m3", "block_size": 16}),
           ("fp8_e4m3", {"scale_mode": "float", "scale_format": "bfloat16"}),
           ("fp8_e4m3", {"scale_mode": "float"}), ("fp4_e2m1", {"scale_mode": "rceil"}),
           ("fp6_e2m3", {"scale_mode": "even", "scale_format": "e5m0"}), ("int8", {"scale_mode": "ceil"}),
           # non-saturating: overflow gives NaN (e4m3) and Inf (e5m2), not the clamp
           ("fp8_e4m3", {"saturating": False}), ("fp8_e5m2", {"saturating": False})]
ROUNDINGS = ("even", "nearest", "floor", "stochastic")
DTYPES = (torch.float32, torch.bfloat16, torch.float16)
