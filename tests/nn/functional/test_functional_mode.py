"""Functional GEMMs inside a model (matmul / @ / bmm, scaled dot-product attention, F.linear),
quantized by quantize_model(recipe=...) through a torch function mode, against the composition."""
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
import torch.nn.functional as F
from torch import nn

import groupquant as gq
from groupquant.nn import QuantLinear, recipe, remove_functional


def _fq(t, dim, fmt="fp8_e4m3"):
    return gq.fake_quant(t, fmt, 32, dim)


class Attention(nn.Module):
    """Functional attention on given q, k, v (no weights): what the mode sees in a transformer."""

    def __init__(self, **sdpa):
        super().__init__()
        self.sdpa = sdpa

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, **self.sdpa)


def _composition(q, k, v, mask=None, is_causal=False, scale=None, gqa=False):
    """torch's definition of SDPA with Q(q) Q(k)^T along the head dim and Q(P) Q(v) along the keys."""
    if gqa:
        k = k.repeat_interleave(q.size(-3) // k.size(-3), -3)
        v = v.repeat_interleave(q.size(-3) // v.size(-3), -3)
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    s = torch.matmul(_fq(q, -1), _fq(k.transpose(-2, -1), -2)) * scale
    L, S = q.size(-2), k.size(-2)
    if is_causal:
        s = s + torch.zeros(L, S).masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), float("-inf"))
    elif mask is not None:
        s = s + (torch.zeros(L, S).masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else mask)
    return torch.matmul(_fq(torch.softmax(s, -1), -1), _fq(v, -2))


def _qkv(heads=4, kv_heads=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    scale = torch.logspace(-3, 3, 40, base=2.0).reshape(40, 1)  # tokens spanning binades
    q = torch.randn(2, heads, 40, 48, generator=g) * scale
    k = torch.randn(2, kv_heads, 40, 48, generator=g) * scale
    v = torch.randn(2, kv_heads, 40, 48, generator=g) * scale
    return q, k, v


@pytest.mark.parametrize("sdpa, gqa", [({}, False), ({"is_causal": True}, False), ({"scale": 0.3}, False),
                                       ({"enable_gqa": True}, True)])
def test_sdpa_is_decomposed_with_quantized_gemms(sdpa, gqa):
    model = Attention(**sdpa)
    q, k, v = _qkv(kv_heads=2 if gqa else 4)
    gq.quantize_model(model, recipe="mxfp8")
    out = model(q, k, v)
    expected = _composition(q, k, v, is_causal=sdpa.get("is_causal", False), scale=sdpa.get("scale"), gqa=gqa)
    assert torch.equal(out, expected)


@pytest.mark.parametrize("kind", ["bool", "float"])
def test_sdpa_masks(kind):
    q, k, v = _qkv(seed=1)
    g = torch.Generator().manual_seed(2)
    mask = torch.rand(40, 40, generator=g) > 0.3
    mask[:, 0] = True
    if kind == "float":
        mask = torch.randn(40, 40, generator=g)
    model = Attention(attn_mask=mask)
    gq.quantize_model(model, recipe="mxfp8")
    assert torch.equal(model(q, k, v), _composition(q, k, v, mask=mask))


def test_bad_mask_dtype_is_named():
    q, k, v = _qkv(seed=3)
    bad = Attention(attn_mask=torch.ones(40, 40, dtype=torch.int64))
    gq.quantize_model(bad, recipe="mxfp8")
    with pytest.raises(TypeError, match="attn_mask must be bool or a float tensor"):
        bad(q, k, v)


def test_unquantized_decomposition_equals_torch():
    q, k, v = _qkv(seed=4)
    model = Attention(is_causal=True)
    gq.quantize_model(model, recipe=recipe("mxfp8").replace(input_quant=None, grad_output_quant=None))
    torch.testing.assert_close(model(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               rtol=1e-5, atol=1e-5)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(48, 48)
        self.w = nn.Parameter(torch.randn(48, 48) / 7)

    def forward(self, a, b):
        return self.proj(a @ b) + F.linear(a, self.w)


def test_matmul_linear_and_layers_are_each_quantized_once():
    model = Block()
    a = torch.randn(3, 40, 48) * torch.logspace(-2, 2, 48, base=2.0)
    b = torch.randn(3, 48, 48)
    w, proj_w, proj_b = model.w.detach().clone(), model.proj.weight.detach().clone(), model.proj.bias.detach().clone()
    gq.quantize_model(model, recipe="mxfp8")
    ab = torch.matmul(_fq(a, -1), _fq(b, -2))
    expected = F.linear(_fq(ab, -1), _fq(proj_w, 1), proj_b) + F.linear(_fq(a, -1), _fq(w, 1))
    assert torch.equal(model(a, b), expected)
    assert isinstance(model.proj, QuantLinear)
    assert remove_functional(model) and not remove_functional(model)
    plain_matmul = F.linear(_fq(a @ b, -1), _fq(proj_w, 1), proj_b) + F.linear(a, w)
    assert torch.equal(model(a, b), plain_matmul)  # the mode is gone; the converted layer stays


def test_backward_through_functional_attention_is_quantized():
    q, k, v = (t.requires_grad_(True) for t in _qkv(seed=5))
    model = Attention()
    gq.quantize_model(model, recipe="mxfp8_e4m3_e5m2")
    model(q, k, v).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    F.scaled_dot_product_attention(q2, k2, v2).sum().backward()
    assert not torch.equal(q.grad, q2.grad)  # quantized GEMMs in backward
    cos = F.cosine_similarity(q.grad.flatten(), q2.grad.flatten(), dim=0)
    assert cos > 0.9


class Mixer(nn.Module):
    """Element-wise ops a transformer block calls functionally."""

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(48)

    def forward(self, a, b):
        h = F.gelu(a) + torch.tanh(b)          # same-shape add of two activations
        return self.norm(torch.softmax(h, dim=-1) * torch.sigmoid(a))


def test_elementwise_precision_routes_each_op_to_its_rounded_version():
    from groupquant import elementwise as ew

    model = Mixer()
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 40, 48, generator=g) * 4, torch.randn(3, 40, 48, generator=g)
    gq.quantize_model(model, recipe=recipe("mxfp8").replace(elementwise="bfloat16"))
    h = ew.add(ew.gelu(a), ew.tanh(b))
    expected = ew.layer_norm(ew.mul(ew.softmax(h, -1), ew.sigmoid(a)), (48,), model.norm.weight, model.norm.bias,
                             model.norm.eps)
    assert torch.equal(model(a, b), expected)
    with pytest.raises(gq.inject.ConfigError) as info:
        recipe("mxfp8").replace(elementwise="e9m30")
    assert info.value.setting == "elementwise"


def test_attention_softmax_in_the_recipes_precision():
    from groupquant import elementwise as ew

    q, k, v = _qkv(seed=8)
    model = Attention()
    gq.quantize_model(model, recipe=recipe("mxfp8").replace(elementwise="bfloat16"))
    s = torch.matmul(_fq(q, -1), _fq(k.transpose(-2, -1), -2)) * (1 / math.sqrt(48))
    assert torch.equal(model(q, k, v), torch.matmul(_fq(ew.softmax(s, -1), -1), _fq(v, -2)))


def test_functional_mode_under_torch_compile():
    q, k, v = _qkv(seed=9)
    model = Attention(is_causal=True)
    gq.quantize_model(model, recipe="mxfp8")
    eager = model(q, k, v)
    assert torch.equal(torch.compile(model)(q, k, v), eager)
    assert torch.equal(eager, _composition(q, k, v, is_causal=True))


def test_a_model_with_functional_quantization_saves_and_loads():
    import io

    q, k, v = _qkv(seed=10)
    model = Attention()
    gq.quantize_model(model, recipe="mxfp8")
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert torch.equal(loaded(q, k, v), model(q, k, v))
    assert torch.equal(loaded(q, k, v), _composition(q, k, v))
    assert remove_functional(loaded)
    torch.testing.assert_close(loaded(q, k, v), F.scaled_dot_product_attention(q, k, v))


class MaskedAttention(nn.Module):
    """SDPA with the mask as an input (a padding mask differs per sequence)."""

    def forward(self, q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _padding_case(kind):
    """Two sequences; the second has query rows whose mask hides every key (padding)."""
    q, k, v = _qkv(seed=11)
    g = torch.Generator().manual_seed(12)
    keep = torch.rand(2, 1, 40, 40, generator=g) > 0.3
    keep[..., 0] = True
    keep[1, :, 30:] = False  # padded queries of sequence 1 see no key at all
    if kind == "bool":
        return q, k, v, keep
    return q, k, v, torch.zeros(keep.shape).masked_fill(~keep, float("-inf")) + 0.1 * torch.randn(keep.shape, generator=g)


def _masked_composition(q, k, v, mask, fmt, block):
    """torch's SDPA definition with fake-quantized GEMM operands; fully masked rows set to 0 as torch does."""
    fq = lambda t, dim: gq.fake_quant(t, fmt, block, dim)  # noqa: E731
    s = torch.matmul(fq(q, -1), fq(k.transpose(-2, -1), -2)) / math.sqrt(q.size(-1))
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else mask
    s = s + bias
    dead = torch.isneginf(s).all(-1, keepdim=True)
    p = torch.where(dead, torch.zeros_like(s), torch.softmax(s, -1))
    return torch.matmul(fq(p, -1), fq(v, -2))


def _assert_matches(out, expected, fmt):
    """Bit for bit for MX (products of MX values sum exactly in float32); NVFP4's float32 tensor
    scale makes the GEMM's sums depend on the BLAS summation order (operand layout): to 1 ulp-ish."""
    if fmt == "nvfp4":
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(out, expected)


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("name, fmt, block", [("mxfp8", "fp8_e4m3", 32), ("nvfp4", "nvfp4", 16)])
def test_sdpa_fully_masked_rows_give_zero_like_torch(kind, name, fmt, block):
    q, k, v, mask = _padding_case(kind)
    model = MaskedAttention()
    gq.quantize_model(model, recipe=name)
    out = model(q, k, v, mask)
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(torch_out[1, :, 30:], torch.zeros_like(torch_out[1, :, 30:]))  # torch's rule
    assert torch.equal(out[1, :, 30:], torch_out[1, :, 30:])
    # every other row (and the other sequence under NVFP4's per-tensor scale) as the composition
    _assert_matches(out, _masked_composition(q, k, v, mask, fmt, block), fmt)
    assert torch.isfinite(out).all()


def test_sdpa_fully_masked_rows_have_zero_gradient_like_torch():
    q, k, v, mask = _padding_case("bool")
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    model = MaskedAttention()
    gq.quantize_model(model, recipe="mxfp8")
    model(q, k, v, mask).sum().backward()
    q2 = q.detach().clone().requires_grad_(True)
    F.scaled_dot_product_attention(q2, k.detach(), v.detach(), attn_mask=mask).sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()
    assert torch.equal(q.grad[1, :, 30:], q2.grad[1, :, 30:])  # zero: the row's output is constant


class MatmulOut(nn.Module):
    def forward(self, a, b, c):
        return torch.matmul(a, b, out=c)


@pytest.mark.parametrize("shape", [(3, 40, 24), (0,)])
def test_matmul_out_writes_the_given_tensor(shape):
    g = torch.Generator().manual_seed(13)
    a, b = torch.randn(3, 40, 48, generator=g), torch.randn(3, 48, 24, generator=g)
    c = torch.full(shape, 7.0)
    model = MatmulOut()
    gq.quantize_model(model, recipe="mxfp8")
    out = model(a, b, c)
    assert out is c
    assert torch.equal(c, torch.matmul(_fq(a, -1), _fq(b, -2)))


def test_matmul_out_refuses_autograd_like_torch():
    a, b, c = torch.randn(4, 32, requires_grad=True), torch.randn(32, 8), torch.empty(4, 8)
    with pytest.raises(RuntimeError) as torch_error:
        torch.matmul(a, b, out=c)
    model = MatmulOut()
    gq.quantize_model(model, recipe="mxfp8")
    with pytest.raises(RuntimeError) as ours:
        model(a, b, c)
    assert str(ours.value) == str(torch_error.value)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), dead=st.lists(st.integers(0, 15), max_size=16), kind=st.sampled_from(["bool", "float"]))
def test_sdpa_fully_masked_rows_property(seed, dead, kind):
    """Any set of fully masked query rows: zeros there (torch's rule), the NVFP4 composition elsewhere."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 2, 16, 32, generator=g) for _ in range(3))
    keep = torch.rand(2, 1, 16, 16, generator=g) > 0.5
    keep[..., seed % 16] = True
    keep[0, :, dead] = False
    mask = keep if kind == "bool" else torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    model = MaskedAttention()
    gq.quantize_model(model, recipe="nvfp4")
    out = model(q, k, v, mask)
    torch_out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.equal(out[0, :, dead], torch_out[0, :, dead])
    _assert_matches(out, _masked_composition(q, k, v, keep, "nvfp4", 16), "nvfp4")


class _RecipeBlock(nn.Module):
    """A pre-norm transformer block: SDPA attention and a GELU MLP (issue 21's compile case)."""

    def __init__(self, d=32, heads=2):
        super().__init__()
        self.heads, self.norm = heads, nn.LayerNorm(d)
        self.qkv, self.out, self.ff = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.qkv(self.norm(x)).split(d, -1))
        x = x + self.out(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(F.gelu(x))


@pytest.mark.parametrize("elementwise", ["bfloat16"])
def test_recipe_transformer_block_under_torch_compile_equals_eager(elementwise):
    """Forward and gradients of a recipe block (layers and functional calls quantized) compiled
    (graph capture through the function mode; aot_eager keeps eager numerics) equal eager."""
    torch.manual_seed(0)
    model = _RecipeBlock()
    gq.quantize_model(model, recipe=recipe("mxfp8").replace(elementwise=elementwise), functional=True)
    x = torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(1))
    eager = model(x)
    eager.square().mean().backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    compiled = torch.compile(model, backend="aot_eager")(x)
    compiled.square().mean().backward()
    assert torch.equal(compiled, eager)
    for n, p in model.named_parameters():
        assert torch.equal(p.grad, want[n]), n


class _FreeWeight(torch.nn.Module):
    """A model that calls F.linear with its own parameter outside any nn.Linear (the mode's reach)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(8, 64) * torch.logspace(-3, 3, 64))

    def forward(self, x):
        return F.linear(x, self.w)


@pytest.mark.parametrize("name, on", [("mxfp4_weight_only", False), ("nvfp4_weight_only", False), ("mxfp4", True),
                                      ("mxfp8", True)])
def test_functional_default_follows_whether_the_recipe_quantizes_activations(name, on):
    r = recipe(name)
    assert r.quantizes_activations is on
    x = torch.randn(3, 64)
    model = gq.quantize_model(_FreeWeight(), recipe=name)
    assert ("_groupquant_functional_handle" in model.__dict__) is on
    float_out = F.linear(x, model.w)
    assert torch.equal(model(x), float_out) is not on  # off: F.linear on the free weight stays float
    forced = gq.quantize_model(_FreeWeight(), recipe=name, functional=True)
    assert not torch.equal(forced(x), float_out)  # forced on, the free weight is quantized (weight-only too)
