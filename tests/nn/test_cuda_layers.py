"""Quant layers on CUDA (run where a GPU and a CUDA build of torch are): the quantized operands and
the straight-through gradients (C++ autograd of the native ops) equal the CPU ones bit for bit, and
the lean and plain training paths agree."""
import copy

import pytest
import torch

import groupquant as gq
from groupquant.nn import QuantConv2d, QuantLinear
from groupquant.ops import native
from groupquant.quantizers import MXFloat4e2m1Weight, MXFloat8e4m3Act, MXFloat8e4m3Weight, MXInt8Weight

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU and a CUDA build of torch")
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _binades(*shape):
    g = torch.Generator().manual_seed(7)
    return torch.randn(*shape, generator=g) * torch.logspace(-5, 5, shape[-1])


@pytest.fixture
def _native_cuda():
    if not native.native_available(torch.device("cuda")):
        pytest.skip("the CUDA kernels are not built")


@needs_gpu
@pytest.mark.usefixtures("_native_cuda")
@pytest.mark.parametrize("weight_q", [MXFloat8e4m3Weight, MXFloat4e2m1Weight, MXInt8Weight])
def test_quantized_operands_equal_the_cpu_ones(weight_q):
    layer = QuantLinear(70, 24, weight_quant=weight_q, input_quant=MXFloat8e4m3Act)
    layer.weight.data.copy_(_binades(24, 70))
    x = _binades(5, 70)
    gpu = copy.deepcopy(layer).cuda()
    assert torch.equal(gpu.input_quant.quant_value(x.cuda()).cpu(), layer.input_quant.quant_value(x))
    qg, qc = gpu.quant_weight(), layer.quant_weight()
    assert torch.equal(qg.value.detach().cpu(), qc.value.detach()) and torch.equal(qg.scale_.cpu(), qc.scale_)
    assert torch.equal(qg.codes_().cpu(), qc.codes_())


@needs_gpu
@pytest.mark.usefixtures("_native_cuda")
@pytest.mark.parametrize("ste", ["identity", "clipped"])
def test_straight_through_gradients_equal_the_cpu_ones(ste):
    x = _binades(6, 96)
    grads = []
    for device in ("cpu", "cuda"):
        xd = x.detach().to(device).requires_grad_(True)
        y = gq.fake_quant(xd, "fp8_e4m3", 32, -1, scale_mode="ceil" if ste == "identity" else "floor", ste=ste)
        y.backward(torch.linspace(-1, 1, y.numel(), device=device).reshape(y.shape))
        grads.append(xd.grad.cpu())
    assert torch.equal(grads[0], grads[1])


@pytest.mark.parametrize("make", [lambda: QuantLinear(96, 40, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act),
                                  lambda: QuantConv2d(40, 16, 3, padding=1, weight_quant=MXFloat8e4m3Weight,
                                                      input_quant=MXFloat8e4m3Act)])
@pytest.mark.parametrize("device", DEVICES)
def test_lean_and_plain_training_paths_agree_on_every_device(make, device):
    torch.backends.cudnn.deterministic = True
    torch.manual_seed(0)
    layer = make().to(device)
    x = (torch.randn(4, 96) if isinstance(layer, QuantLinear) else torch.randn(2, 40, 6, 5)).to(device)
    outs = []
    for lean in (True, False):
        m = copy.deepcopy(layer)
        m.memory_lean_backward = lean
        xi = x.clone().requires_grad_(True)
        y = m(xi)
        assert ("QuantGemm" in type(y.grad_fn).__name__) == lean  # the one quant-GEMM autograd function
        y.backward(torch.ones_like(y))
        outs.append((y.detach(), xi.grad, m.weight.grad, m.bias.grad))
    for a, b in zip(*outs):
        assert torch.equal(a, b)
