"""Issue 17 item 10 and the compat errors: no silent wrong answer, torch's behaviour for the input
shapes torch accepts, and errors that name the mx_specs key the user set."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

from groupquant.compat.microxcaling import (Conv1d, Conv2d, Conv3d, Linear, MxSpecs, Softmax, UnknownMxSpecError,
                                            finalize_mx_specs, linear, matmul, recipe_from_mx_specs, softmax)
from groupquant.compat.microxcaling.mx_mapping import injected_pyt_ops
from groupquant.nn import QuantLinear

SPECS = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp8_e4m3", block_size=32, bfloat=16))


def test_finalize_with_only_misspelled_keys_raises_did_you_mean():
    with pytest.raises(UnknownMxSpecError, match="did you mean 'w_elem_format'"):
        finalize_mx_specs({"w_elem_fromat": "fp8_e4m3", "block_size": 32})
    with pytest.raises(UnknownMxSpecError, match="did you mean 'bfloat'"):
        finalize_mx_specs({"bflaot": 16}, early_exit=False)


def test_nested_injection_keeps_the_outer_one():
    outer, inner = MxSpecs(SPECS), MxSpecs(SPECS, w_elem_format="fp4_e2m1")
    original = torch.nn.Linear
    with injected_pyt_ops(outer):
        with injected_pyt_ops(inner):
            assert torch.nn.Linear(32, 4).mx_specs["w_elem_format"] == "fp4_e2m1"
        layer = torch.nn.Linear(32, 4)
        assert isinstance(layer, Linear) and layer.mx_specs["w_elem_format"] == "fp8_e4m3"
        x, w = torch.randn(2, 32), torch.randn(4, 32)
        assert torch.equal(F.linear(x, w), linear(x, w, mx_specs=outer))
    assert torch.nn.Linear is original and not isinstance(torch.nn.Linear(32, 4), Linear)


def test_recipe_warns_by_name_for_bfloat():
    with pytest.warns(UserWarning, match="bfloat=16"):
        recipe_from_mx_specs(dict(SPECS))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recipe_from_mx_specs(MxSpecs(SPECS, bfloat=0))


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp4_e2m1"])
def test_recipe_honours_bfloat_on_every_gemm_operand(fmt):
    """QuantLinear with the recipe computes the compat Linear's GEMMs: rounding its results to
    bfloat16 (what the warning says the recipe leaves out) gives the compat results bit for bit."""
    specs = finalize_mx_specs(dict(w_elem_format=fmt, a_elem_format=fmt, block_size=32, bfloat=16, round="even"))
    with pytest.warns(UserWarning, match="bfloat=16"):
        kwargs = recipe_from_mx_specs(specs).layer_kwargs()
    torch.manual_seed(0)
    layer = QuantLinear(128, 64, bias=False, **kwargs)
    x = (torch.randn(32, 128) * 3).requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(32, 64)
    y_native, y_compat = layer(x), linear(x2, w, mx_specs=specs)
    y_native.backward(g), y_compat.backward(g)
    bf = lambda t: t.to(torch.bfloat16).float()  # noqa: E731  torch's cast, round to nearest even
    assert torch.equal(bf(y_native), y_compat)
    assert torch.equal(bf(x.grad), x2.grad) and torch.equal(bf(layer.weight.grad), w.grad)


def _grads(fn, *tensors):
    leaves = [t.detach().clone().requires_grad_() for t in tensors]
    y = fn(*leaves)
    y.backward(torch.ones_like(y))
    return y.detach(), [t.grad for t in leaves]


@pytest.mark.parametrize("specs", [None, SPECS])
def test_linear_on_1d_input_behaves_as_torch(specs):
    torch.manual_seed(0)
    layer = Linear(32, 8, mx_specs=specs)
    x = torch.randn(32)
    y1, (g1,) = _grads(layer, x)
    y2, (g2,) = _grads(layer, x[None])
    ref = torch.nn.functional.linear(x, layer.weight)  # torch: a 1-d input gives a 1-d output
    assert y1.shape == ref.shape == (8,) and g1.shape == x.shape
    assert torch.equal(y1, y2[0]) and torch.equal(g1, g2[0])


@pytest.mark.parametrize("cls,shape", [(Conv1d, (8, 10)), (Conv2d, (8, 6, 6)), (Conv3d, (8, 3, 4, 4))])
@pytest.mark.parametrize("specs", [None, SPECS])
def test_conv_on_unbatched_input_behaves_as_torch(cls, shape, specs):
    torch.manual_seed(1)
    layer = cls(8, 4, 3 if cls is not Conv3d else 2, padding=1, mx_specs=specs)
    x = torch.randn(*shape)
    y1, (g1,) = _grads(layer, x)
    y2, (g2,) = _grads(layer, x[None])
    torch_layer = getattr(torch.nn, cls.__name__)(8, 4, layer.kernel_size, padding=1)
    torch_layer.load_state_dict(layer.state_dict())
    assert y1.shape == torch_layer(x).shape  # torch takes unbatched input and returns it unbatched
    assert torch.equal(y1, y2[0]) and torch.equal(g1, g2[0])


@pytest.mark.parametrize("shape", [(5,), (3, 5), (2, 3, 5), (2, 3, 4, 5)])
def test_softmax_dim_none_follows_torch(shape):
    x = torch.randn(*shape)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        want = F.softmax(x, dim=None)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        got = softmax(x, dim=None, mx_specs=MxSpecs(bfloat=16))
    assert torch.allclose(got, want, atol=1e-2) and torch.allclose(got.sum(_torch_dim(len(shape))), torch.ones(1), atol=2e-2)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        module = Softmax(mx_specs=MxSpecs(bfloat=16))(x)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        assert torch.equal(module, softmax(x, dim=None, mx_specs=MxSpecs(bfloat=16)))


def _torch_dim(ndim: int) -> int:
    """torch's implicit softmax dim, written out from its documented rule."""
    return 0 if ndim in (0, 1, 3) else 1


@pytest.mark.parametrize("key,call", [
    ("a_elem_format", lambda s: Linear(32, 4, mx_specs=s)(torch.randn(2, 32))),
    ("w_elem_format", lambda s: Linear(32, 4, mx_specs=s)(torch.randn(2, 32))),
    ("a_elem_format_bp_os", lambda s: Linear(32, 4, mx_specs=s)(torch.randn(2, 32, requires_grad=True)).sum().backward()),
    ("a_elem_format", lambda s: matmul(torch.randn(2, 32), torch.randn(32, 3), mx_specs=s)),
    ("w_elem_format", lambda s: Conv2d(32, 4, 1, mx_specs=s)(torch.randn(1, 32, 2, 2))),
])
def test_format_errors_name_the_key_the_user_set(key, call):
    specs = dict(SPECS)
    specs[key] = "fp9_e4m4"
    specs = finalize_mx_specs(specs)
    with pytest.raises(ValueError, match=f"{key}='fp9_e4m4'"):
        call(specs)


def test_round_errors_name_the_key_the_user_set():
    specs = finalize_mx_specs(dict(SPECS, round_output="stochastic"))
    with pytest.raises(ValueError, match="round_output='stochastic'"):
        Linear(32, 4, mx_specs=specs)(torch.randn(2, 32))
    specs = finalize_mx_specs(dict(SPECS, round_mx_output="up"))
    with pytest.raises(ValueError, match="round_mx_output='up'"):
        Linear(32, 4, mx_specs=specs)(torch.randn(2, 32))


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("norm", ["group_norm", "layer_norm"])
def test_norms_without_weight_have_torch_gradients(norm, affine):
    """With specs that round nothing, the compat norms are torch's, a norm without weight / bias
    included (its backward must not return gradients for parameters that were not given)."""
    from groupquant.compat.microxcaling import group_norm, layer_norm
    torch.manual_seed(2)
    x = torch.randn(2, 4, 5)
    size = 4 if norm == "group_norm" else 5
    params = [torch.randn(size), torch.randn(size)] if affine else []
    specs = MxSpecs()
    if norm == "group_norm":
        ours, theirs = (lambda t, *p: group_norm(t, 2, *p, mx_specs=specs)), (lambda t, *p: F.group_norm(t, 2, *p))
    else:
        ours = lambda t, *p: layer_norm(t, 5, *p, eps=1e-5, mx_specs=specs)  # noqa: E731
        theirs = lambda t, *p: F.layer_norm(t, (5,), *p, eps=1e-5)  # noqa: E731
    got, got_grads = _grads(ours, x, *params)
    want, want_grads = _grads(theirs, x, *params)
    assert torch.allclose(got, want, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(got_grads, want_grads))


@pytest.mark.parametrize("shapes", [((64,), (64, 8)), ((3, 64), (64,)), ((2, 3, 64), (64,)), ((64,), (2, 64, 5))])
def test_matmul_with_a_vector_behaves_as_torch(shapes):
    """torch.matmul promotes a 1-d operand and removes the added dim; so does the compat matmul,
    forward and backward (it failed in backward before)."""
    torch.manual_seed(3)
    a, b = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    specs = finalize_mx_specs(dict(a_elem_format="fp8_e4m3", block_size=32))
    y, (ga, gb) = _grads(lambda p, r: matmul(p, r, mx_specs=specs), a, b)
    assert y.shape == torch.matmul(a, b).shape and ga.shape == a.shape and gb.shape == b.shape
    a2 = a.unsqueeze(0) if a.ndim == 1 else a
    b2 = b.unsqueeze(-1) if b.ndim == 1 else b
    y2, (ga2, gb2) = _grads(lambda p, r: matmul(p, r, mx_specs=specs), a2, b2)
    assert torch.equal(y, y2.reshape(y.shape)) and torch.equal(ga, ga2.reshape(a.shape))
    assert torch.equal(gb, gb2.reshape(b.shape))


def test_recipe_without_backprop_quantization_is_microxcaling_float_backward():
    """microxcaling's quantize_backprop=False: float backward GEMMs on the high-precision x and W
    (dX = dY W, dW = dY^T x), not the straight-through gradient of the quantized forward."""
    specs = finalize_mx_specs(dict(w_elem_format="fp4_e2m1", a_elem_format="fp4_e2m1", block_size=32,
                                   quantize_backprop=False))
    torch.manual_seed(4)
    layer = QuantLinear(64, 16, bias=True, **recipe_from_mx_specs(specs).layer_kwargs())
    x = torch.randn(3, 8, 64, requires_grad=True)
    g = torch.randn(3, 8, 16)
    layer(x).backward(g)
    w = layer.weight.detach()
    assert torch.equal(x.grad, g @ w)  # torch's float GEMM on the float weight
    assert torch.allclose(layer.weight.grad, g.reshape(-1, 16).t() @ x.detach().reshape(-1, 64), atol=1e-5)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, layer.bias))
    y2 = linear(x2, w2, b2, mx_specs=specs)
    y2.backward(g)
    assert torch.equal(layer(x), y2) and torch.equal(x.grad, x2.grad)
    assert torch.equal(layer.weight.grad, w2.grad) and torch.equal(layer.bias.grad, b2.grad)


def test_recipe_carries_scale_bits_and_names_what_it_cannot():
    """scale_bits k is the quantizers' e{k}m0 scale format: on small values (shared exponents
    clamped at -(2**(k-1) - 1)) the recipe's layer equals the compat linear."""
    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp8_e4m3", block_size=32, scale_bits=5))
    torch.manual_seed(5)
    layer = QuantLinear(64, 16, bias=False, **recipe_from_mx_specs(specs).layer_kwargs())
    x = torch.randn(8, 64) * 2.0 ** -20
    with torch.no_grad():
        layer.weight.mul_(2.0 ** -20)
    assert torch.equal(layer(x), linear(x, layer.weight.detach(), mx_specs=specs))
    for key in ("shared_exp_from_float_log2", "mx_flush_fp32_subnorms"):
        with pytest.warns(UserWarning, match=key):
            recipe_from_mx_specs(MxSpecs(specs, **{key: True}))
    with pytest.raises(ValueError, match="scale_bits=12"):
        recipe_from_mx_specs(MxSpecs(specs, scale_bits=12))
