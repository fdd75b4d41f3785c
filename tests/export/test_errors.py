"""One export error base class: a refusal of each export job (ONNX, packed inference, checkpoints)
is caught as ``ExportBaseError`` (and ``ValueError``) and keeps its own name."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import groupquant as gq
from groupquant.export import CheckpointError, ExportBaseError, ExportError, PackError, mxfp4_packed_tensor


@pytest.mark.parametrize("cls", [ExportError, PackError, CheckpointError])
def test_each_job_error_shares_the_base(cls):
    assert issubclass(cls, ExportBaseError) and issubclass(cls, ValueError)
    assert cls.__module__ == "groupquant.export.errors"


def test_packed_inference_refusal_is_an_export_error():
    blocks = torch.zeros(4, 2, 16, dtype=torch.int8)  # MXFP4 blocks must be uint8
    with pytest.raises(ExportBaseError, match="uint8") as info:
        mxfp4_packed_tensor(blocks, torch.zeros(4, 2, dtype=torch.uint8))
    assert type(info.value) is PackError


def test_checkpoint_refusal_is_an_export_error(tmp_path):
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(ExportBaseError, match="empty") as info:
        gq.load(empty)
    assert type(info.value) is CheckpointError


def test_onnx_refusal_is_an_export_error():
    pytest.importorskip("onnx")
    from groupquant.export import export_onnx
    with pytest.raises(ExportBaseError, match="LSTM") as info:
        export_onnx(nn.Sequential(nn.LSTM(4, 4)), torch.randn(2, 4))
    assert type(info.value) is ExportError
