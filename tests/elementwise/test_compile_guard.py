"""Element-wise ops in an emulated precision under torch.compile: gradients equal eager's on every
torch of the supported range. torch 2.11 compiled their custom backward to zeros, so there they
refuse to be traced for training (dynamo breaks the graph and runs them eagerly; ``fullgraph=True``
raises with a message that says what to do)."""
from __future__ import annotations

import pytest
import torch

from groupquant.elementwise import layer_norm, mul, softmax
from groupquant.elementwise import rounded_math


def _step(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = layer_norm(x, (32,), w, None, precision="bfloat16")
    return softmax(mul(y, w, "bfloat16"), -1, "bfloat16").square().sum()


def _grads(fn, x: torch.Tensor, w: torch.Tensor):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    fn(x, w).backward()
    return x.grad, w.grad


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(3, 5, 32, generator=g) * 4, torch.rand(32, generator=g) + 0.5


def test_compiled_gradients_equal_eager_on_this_torch() -> None:
    x, w = _inputs()
    torch._dynamo.reset()
    compiled = _grads(torch.compile(_step, backend="aot_eager"), x, w)
    for got, want in zip(compiled, _grads(_step, x, w)):
        assert torch.equal(got, want)


def test_a_torch_with_wrong_compiled_gradients_runs_the_ops_eagerly(monkeypatch: pytest.MonkeyPatch) -> None:
    # as on torch 2.11: the ops refuse tracing, the compiled step still gets eager's gradients
    monkeypatch.setattr(rounded_math, "_TORCH", (2, 11))
    x, w = _inputs()
    torch._dynamo.reset()
    compiled = _grads(torch.compile(_step, backend="aot_eager"), x, w)
    for got, want in zip(compiled, _grads(_step, x, w)):
        assert torch.equal(got, want)
    torch._dynamo.reset()
    with pytest.raises(Exception, match="zero gradients.*fullgraph"):
        _grads(torch.compile(_step, backend="aot_eager", fullgraph=True), x, w)
