"""File sizes of a quantized model: float32 state dict vs packed state dict vs ONNX export.

Run: PYTHONPATH=src python benchmarks/export_sizes.py   (needs the export extra for ONNX)

A two-layer model (4096x4096 and 1024x4096 QuantLinear) per MX weight format. Ratios are
against the float32 ``torch.save(model.state_dict())`` of the same model, measured in this run.
Expected packed ratio: (element bits + 8/32) / 32, plus float32 biases.
"""
from __future__ import annotations

import io
import os
import tempfile

import torch
from torch import nn

import groupquant.quantizers as Q
from groupquant.export import export_onnx, packed_state_dict
from groupquant.nn import QuantLinear


def saved_size(obj: object) -> int:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return len(buf.getvalue())


def main() -> None:
    torch.manual_seed(0)
    print(f"{'weight format':22s} {'float32 MiB':>11s} {'packed':>8s} {'ideal':>7s} {'onnx f32 scales':>16s} {'onnx e8m0':>10s}")
    for wq, bits in ((Q.MXFloat4e2m1Weight, 4), (Q.MXFloat6e2m3Weight, 6), (Q.MXFloat8e4m3Weight, 8),
                     (Q.MXInt8Weight, 8)):
        model = nn.Sequential(QuantLinear(4096, 4096, weight_quant=wq), QuantLinear(4096, 1024, weight_quant=wq))
        ref = saved_size(model.state_dict())
        packed = saved_size(packed_state_dict(model))
        with tempfile.TemporaryDirectory() as d:
            a, b = os.path.join(d, "a.onnx"), os.path.join(d, "b.onnx")
            export_onnx(model, torch.randn(1, 4096), a)
            export_onnx(model, torch.randn(1, 4096), b, opset=25, scale_format="e8m0")
            onnx_f32, onnx_e8m0 = os.path.getsize(a), os.path.getsize(b)
        print(f"{wq.__name__:22s} {ref / 2**20:11.2f} {packed / ref:8.4f} {(bits + 0.25) / 32:7.4f} "
              f"{onnx_f32 / ref:16.4f} {onnx_e8m0 / ref:10.4f}")


if __name__ == "__main__":
    main()
