"""torch.compile sees whole graphs: a QuantLinear training step and a transformer block under the
``mxfp8`` recipe (every GEMM operand quantized, functional matmul / attention through the
functional mode) compile with ``fullgraph=True`` (a graph break is an error) through dynamo and
AOT autograd (``backend="aot_eager"``: inductor's code generation, slow on a CPU, adds nothing to
whether the graph is whole), and the compiled model computes what eager does, gradients too."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from groupquant.nn import QuantLinear, quantize_model
from groupquant.quantizers import MXFloat8e4m3Act, MXFloat8e4m3Weight


class Block(nn.Module):
    """A pre-norm transformer block: attention (scaled dot product) and a GELU MLP."""

    def __init__(self, d: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.norm2(x))))


def _compiled(model: nn.Module) -> nn.Module:
    torch._dynamo.reset()
    return torch.compile(model, fullgraph=True, backend="aot_eager")


@pytest.mark.parametrize("recompute", [False, True], ids=["Wq kept", "Wq made again"])
def test_compile_of_a_quant_linear_training_step_has_no_graph_break(recompute: bool) -> None:
    torch.manual_seed(0)
    layer = QuantLinear(64, 48, weight_quant=MXFloat8e4m3Weight, input_quant=MXFloat8e4m3Act)
    layer.recompute_quantized_weight = recompute  # the lean backward keeps Wq, or makes it again
    x = torch.randn(8, 64) * torch.logspace(-3, 3, 64)
    twin = copy.deepcopy(layer)
    out, eager = _compiled(twin)(x.requires_grad_()), layer(x)
    assert torch.equal(out, eager)
    out.sum().backward()
    grad_x = x.grad.clone()
    x.grad = None
    eager.sum().backward()
    assert torch.equal(grad_x, x.grad) and torch.equal(twin.weight.grad, layer.weight.grad)


def test_compile_of_a_recipe_transformer_block_has_no_graph_break() -> None:
    torch.manual_seed(0)
    model = quantize_model(nn.Sequential(Block()), recipe="mxfp8")
    x = torch.randn(2, 16, 64)
    twin = copy.deepcopy(model)
    out, eager = _compiled(twin)(x), model(x)
    torch.testing.assert_close(out, eager, rtol=1e-6, atol=1e-6)  # AOT autograd may reorder float ops
    out.sum().backward()
    eager.sum().backward()
    for (name, p), q in zip(twin.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
