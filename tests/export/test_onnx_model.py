import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from groupquant.export.errors import ExportError  # noqa: E402
from groupquant.export.onnx.model import export_onnx  # noqa: E402


def run(model_proto, *xs):
    s = ort.InferenceSession(model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in s.get_inputs()]
    return s.run(None, {n: x.numpy() for n, x in zip(names, xs)})


class ConvBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding="same", groups=2, dilation=2)

    def forward(self, x):
        y = self.pool(F.relu(self.bn(self.conv(x))))
        return y + self.conv2(y) * 0.5


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = ConvBlock()
        self.gap = nn.AdaptiveAvgPool2d(1)
        self.flat = nn.Flatten()
        self.fc = nn.Linear(8, 5)
        self.norm = nn.LayerNorm(5)
        self.act = nn.GELU()

    def forward(self, x):
        return torch.softmax(self.act(self.norm(self.fc(self.flat(self.gap(self.block(x)))))), dim=-1)


def test_float_model_matches_pytorch_for_any_batch(tmp_path):
    torch.manual_seed(0)
    model = Net()
    bn = model.block.bn
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    model.train()
    path = tmp_path / "net.onnx"
    export_onnx(model, torch.randn(2, 3, 16, 16), path)
    assert model.training  # the caller's mode is restored
    loaded = onnx.load(path)
    model.eval()
    for batch in (1, 4):
        x = torch.randn(batch, 3, 16, 16)
        (y,) = run(loaded, x)
        np.testing.assert_allclose(y, model(x).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_export_is_deterministic():
    model = nn.Sequential(nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2))
    x = torch.randn(3, 6)
    assert export_onnx(model, x).SerializeToString() == export_onnx(model, x).SerializeToString()


def test_unsupported_layer_is_named():
    model = nn.Sequential(nn.Linear(4, 4), nn.LSTM(4, 4))
    with pytest.raises(ExportError, match=r"'1' \(LSTM\)"):
        export_onnx(model, torch.randn(2, 4))


def test_unsupported_function_is_named_with_its_module():
    class Inner(nn.Module):
        def forward(self, x):
            return torch.sin(x)

    model = nn.Sequential(nn.Linear(4, 4), Inner())
    with pytest.raises(ExportError, match="sin"):
        export_onnx(model, torch.randn(2, 4))


def test_bad_arguments():
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match="opset"):
        export_onnx(model, torch.randn(1, 4), opset=20)
    with pytest.raises(TypeError, match="float32"):
        export_onnx(model, torch.randn(1, 4).double())
    with pytest.raises(ExportError, match="float32"):
        export_onnx(nn.Linear(4, 2).double(), torch.randn(1, 4))
    with pytest.raises(ValueError, match="scale_format"):
        export_onnx(model, torch.randn(1, 4), scale_format="fp8")
