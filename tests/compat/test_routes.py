"""The compat Linear / conv run groupquant's quant-layer route (recipe_from_mx_specs through
FunctionalLinear / FunctionalConv): 3-d input with bias, forward and backward, against compositions of
fake_quant, float GEMMs and torch's bfloat16 cast in microxcaling's order."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from groupquant import fake_quant
from groupquant.compat.microxcaling import conv1d, finalize_mx_specs, linear, recipe_from_mx_specs


def bf(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).float()


def fq(t: torch.Tensor, fmt: str, dim: int, rounding: str = "even") -> torch.Tensor:
    return fake_quant(t, fmt, 32, dim=dim, rounding=rounding)


def test_linear_3d_with_bias_rounds_and_groups_each_sequence():
    specs = finalize_mx_specs(dict(w_elem_format="fp4_e2m1", a_elem_format="fp8_e4m3", a_elem_format_bp_ex="fp8_e5m2",
                                   block_size=32, bfloat=16, round="even"))
    torch.manual_seed(0)
    x = (torch.randn(3, 20, 64) * 3).requires_grad_()
    w, b = torch.randn(24, 64).requires_grad_(), torch.randn(24).requires_grad_()
    g = torch.randn(3, 20, 24)
    y = linear(x, w, b, mx_specs=specs)
    y.backward(g)
    xr, wr, gr = bf(x.detach()), bf(w.detach()), bf(g)
    assert torch.equal(y, bf(bf(F.linear(fq(xr, "fp8_e4m3", -1), fq(wr, "fp4_e2m1", -1))) + bf(b.detach())))
    assert torch.equal(x.grad, bf(fq(gr, "fp8_e4m3", -1) @ fq(wr, "fp4_e2m1", 0)))
    dw = fq(gr, "fp8_e5m2", -2).reshape(-1, 24).t() @ fq(xr, "fp8_e4m3", -2).reshape(-1, 64)
    assert torch.equal(w.grad, bf(dw)) and torch.equal(b.grad, bf(gr.reshape(-1, 24).sum(0)))


def test_conv1d_with_bias_rounds_once_with_the_bias_inside():
    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp8_e4m3", block_size=32, bfloat=16,
                                   round="even"))
    torch.manual_seed(1)
    x, w, b = torch.randn(2, 32, 9) * 2, torch.randn(5, 32, 3), torch.randn(5)
    want = bf(F.conv1d(fq(bf(x), "fp8_e4m3", 1, "nearest"), fq(bf(w), "fp8_e4m3", 1, "nearest"), bf(b), padding=1))
    assert torch.equal(conv1d(x, w, b, padding=1, mx_specs=specs), want)


def test_one_exponent_per_element_is_group_size_one():
    specs = finalize_mx_specs(dict(w_elem_format="fp4_e2m1", a_elem_format="fp8_e4m3", shared_exp_method="none"))
    torch.manual_seed(2)
    x, w = torch.randn(5, 40) * 3, torch.randn(8, 40)
    want = F.linear(fake_quant(x, "fp8_e4m3", 1, dim=-1), fake_quant(w, "fp4_e2m1", 1, dim=-1))
    assert torch.equal(linear(x, w, mx_specs=specs), want)
    assert "group_size=1" in recipe_from_mx_specs(specs).weight_quant.__name__


def test_int4_and_int2_elements_run_on_the_quant_layer_route():
    """microxcaling's int4 / int2 (symmetric 1.2 / 1.0 fixed point) are the MXINT8 quantizer with
    ``bit_width`` 4 / 2: the compat linear's recipe layer computes the fake_quant composition."""
    from groupquant.compat.microxcaling.recipe import _recipe
    from groupquant.compat.microxcaling.specs import apply_mx_specs
    from groupquant.nn import QuantLinear
    specs = finalize_mx_specs(dict(w_elem_format="int2", a_elem_format="int4", block_size=32))
    torch.manual_seed(3)
    x, w = torch.randn(6, 64) * 3, torch.randn(8, 64)
    layer = QuantLinear(64, 8, bias=False, **_recipe(apply_mx_specs(specs), "mx_specs").layer_kwargs())
    with torch.no_grad():
        layer.weight.copy_(w)
    want = F.linear(fake_quant(x, "int4", 32, rounding="nearest"), fake_quant(w, "int2", 32, rounding="nearest"))
    assert torch.equal(layer(x), want)
    assert torch.equal(linear(x, w, mx_specs=specs), want)


def test_grouped_conv_whose_blocks_fit_each_group_runs_on_the_quant_layer_route():
    """out_channels / groups a multiple of block_size: the quant layer computes microxcaling's grouped
    convolution (forward and backward composition below)."""
    from groupquant.compat.microxcaling import conv2d
    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp4_e2m1", block_size=8, bfloat=16,
                                   round="even"))
    torch.manual_seed(4)
    x = (torch.randn(2, 16, 6, 6) * 4).requires_grad_()
    w, b = torch.randn(32, 4, 3, 3).requires_grad_(), torch.randn(32).requires_grad_()
    g = torch.randn(2, 32, 6, 6)
    y = conv2d(x, w, b, padding=1, groups=4, mx_specs=specs)
    y.backward(g)

    def q(t, fmt, dim):
        return fake_quant(t, fmt, 8, dim=dim, rounding="nearest")

    xr, wr, gr = bf(x.detach()), bf(w.detach()), bf(g)
    want = bf(F.conv2d(q(xr, "fp4_e2m1", 1), q(wr, "fp8_e4m3", 1), bf(b.detach()), padding=1, groups=4))
    assert torch.equal(y, want)
    dx = torch.nn.grad.conv2d_input(x.shape, q(wr, "fp8_e4m3", 0), q(gr, "fp4_e2m1", 1), padding=1, groups=4)
    dw = torch.nn.grad.conv2d_weight(q(xr, "fp4_e2m1", 0), w.shape, q(gr, "fp4_e2m1", 0), padding=1, groups=4)
    assert torch.equal(x.grad, bf(dx)) and torch.equal(w.grad, bf(dw))
    assert torch.equal(b.grad, bf(gr.sum((0, 2, 3))))


def test_block_size_zero_is_one_block_per_axis_on_the_quant_layer_route():
    """block_size=0: the whole axis shares one exponent (microxcaling), here a group as long as the
    dim; forward and backward against fake_quant compositions with block_size=None (the whole dim)."""
    specs = finalize_mx_specs(dict(w_elem_format="fp4_e2m1", a_elem_format="fp8_e4m3", a_elem_format_bp_ex="fp8_e5m2",
                                   block_size=0, bfloat=16, round="even"))
    torch.manual_seed(5)
    x = (torch.randn(3, 20, 64) * 3).requires_grad_()
    w = torch.randn(24, 64).requires_grad_()
    g = torch.randn(3, 20, 24)
    y = linear(x, w, mx_specs=specs)
    y.backward(g)

    def whole(t, fmt, dim):
        return fake_quant(t, fmt, None, dim=dim)

    xr, wr, gr = bf(x.detach()), bf(w.detach()), bf(g)
    assert torch.equal(y, bf(F.linear(whole(xr, "fp8_e4m3", -1), whole(wr, "fp4_e2m1", -1))))
    assert torch.equal(x.grad, bf(whole(gr, "fp8_e4m3", -1) @ whole(wr, "fp4_e2m1", 0)))
    dw = whole(gr, "fp8_e5m2", -2).reshape(-1, 24).t() @ whole(xr, "fp8_e4m3", -2).reshape(-1, 64)
    assert torch.equal(w.grad, bf(dw))


def test_scale_bits_is_a_nan_above_exponent_format_on_the_quant_layer_route():
    """scale_bits=4: exponents in [-7, 7], a block above 7 NaN (microxcaling); the compat linear runs
    the quant layer and equals the block-by-block quantizer's composition, NaN blocks included."""
    from groupquant.compat.microxcaling.mapping import elem_format
    from .mx_blocks import quantize_mx_blocks

    specs = finalize_mx_specs(dict(w_elem_format="fp4_e2m1", a_elem_format="int8", block_size=16, scale_bits=4))
    torch.manual_seed(6)
    x = torch.randn(5, 64) * torch.logspace(-8, 12, 5, base=2.0)[:, None]  # the last rows beyond 2**7
    w = torch.randn(8, 64)

    def blocks(t, fmt):
        return quantize_mx_blocks(t, elem_format(fmt), 16, 1, "nearest", scale_bits=4)

    want = F.linear(blocks(x, "int8"), blocks(w, "fp4_e2m1"))
    got = linear(x, w, mx_specs=specs)
    assert want.isnan().any() and not want.isnan().all()
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())


def test_flush_fp32_subnorms_runs_on_the_quant_layer_route():
    """mx_flush_fp32_subnorms: blocks whose max is a float32 subnormal are zero; the compat linear
    runs the quant layer and equals the block-by-block quantizer's composition."""
    from groupquant.compat.microxcaling.mapping import elem_format
    from .mx_blocks import quantize_mx_blocks

    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp8_e5m2", block_size=16,
                                   mx_flush_fp32_subnorms=True))
    torch.manual_seed(7)
    x = torch.randn(6, 64) * torch.logspace(-140, -100, 64, base=2.0)  # the first blocks subnormal
    w = torch.randn(8, 64) * 2.0 ** 100

    def blocks(t, fmt):
        return quantize_mx_blocks(t, elem_format(fmt), 16, 1, "nearest", flush_fp32_subnorms=True)

    want = F.linear(blocks(x, "fp8_e5m2"), blocks(w, "fp8_e4m3"))
    assert not torch.equal(blocks(x, "fp8_e5m2"), fake_quant(x, "fp8_e5m2", 16, rounding="nearest"))
    assert torch.equal(linear(x, w, mx_specs=specs), want)


def test_grouped_conv_whose_blocks_cross_groups_quantizes_whole_tensors():
    """out_channels / groups (6) not a multiple of block_size (8): microxcaling blocks dY along its
    channels and W along its output channels across the groups; the quant layer does the same
    (``blocks_across_groups``), forward and backward against the composition."""
    from groupquant.compat.microxcaling import conv2d
    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp4_e2m1", block_size=8, bfloat=16,
                                   round="even"))
    torch.manual_seed(8)
    x = (torch.randn(2, 16, 5, 5) * 4).requires_grad_()
    w, b = torch.randn(24, 4, 3, 3).requires_grad_(), torch.randn(24).requires_grad_()
    g = torch.randn(2, 24, 5, 5)
    y = conv2d(x, w, b, padding=1, groups=4, mx_specs=specs)
    y.backward(g)

    def q(t, fmt, dim):
        return fake_quant(t, fmt, 8, dim=dim, rounding="nearest")

    xr, wr, gr = bf(x.detach()), bf(w.detach()), bf(g)
    assert torch.equal(y, bf(F.conv2d(q(xr, "fp4_e2m1", 1), q(wr, "fp8_e4m3", 1), bf(b.detach()), padding=1,
                                      groups=4)))
    dx = torch.nn.grad.conv2d_input(x.shape, q(wr, "fp8_e4m3", 0), q(gr, "fp4_e2m1", 1), padding=1, groups=4)
    dw = torch.nn.grad.conv2d_weight(q(xr, "fp4_e2m1", 0), w.shape, q(gr, "fp4_e2m1", 0), padding=1, groups=4)
    assert torch.equal(x.grad, bf(dx)) and torch.equal(w.grad, bf(dw))
    per_group = torch.cat([q(wr[6 * i:6 * i + 6], "fp8_e4m3", 0) for i in range(4)])  # blocks inside groups
    assert not torch.equal(x.grad, bf(torch.nn.grad.conv2d_input(x.shape, per_group, q(gr, "fp4_e2m1", 1),
                                                                 padding=1, groups=4)))


def test_float_log2_exponent_runs_on_the_quant_layer_route():
    """shared_exp_from_float_log2: the quantizers' scale rule float_log2; the compat linear equals the
    block-by-block quantizer's composition forward and backward (blocks whose amax lies just below a
    power of two get microxcaling's larger scale)."""
    from groupquant.compat.microxcaling.mapping import elem_format
    from .mx_blocks import quantize_mx_blocks
    specs = finalize_mx_specs(dict(w_elem_format="fp8_e4m3", a_elem_format="fp4_e2m1", block_size=16,
                                   shared_exp_from_float_log2=True))
    torch.manual_seed(9)
    x = (torch.randn(6, 64) * 3).requires_grad_()
    w = torch.randn(8, 64)
    with torch.no_grad():  # one element per block at nextafter(2**k, 0)
        x[:, ::16] = torch.nextafter(torch.tensor(8.0), torch.tensor(0.0))
        w[:, ::16] = torch.nextafter(torch.tensor(4.0), torch.tensor(0.0))
    w.requires_grad_()
    g = torch.randn(6, 8)
    y = linear(x, w, mx_specs=specs)
    y.backward(g)

    def blocks(t, fmt, dim):
        return quantize_mx_blocks(t, elem_format(fmt), 16, dim, "nearest", shared_exp_from_float_log2=True)

    xd, wd = x.detach(), w.detach()
    assert torch.equal(y, F.linear(blocks(xd, "fp4_e2m1", 1), blocks(wd, "fp8_e4m3", 1)))
    assert not torch.equal(y, F.linear(fake_quant(xd, "fp4_e2m1", 16, rounding="nearest"),
                                       fake_quant(wd, "fp8_e4m3", 16, rounding="nearest")))
    assert torch.equal(x.grad, blocks(g, "fp4_e2m1", 1) @ blocks(wd, "fp8_e4m3", 0))
    assert torch.equal(w.grad, blocks(g, "fp4_e2m1", 0).t() @ blocks(xd, "fp4_e2m1", 0))
    from groupquant.compat.microxcaling import matmul  # both sides activations: a_elem_format
    assert torch.equal(matmul(xd, wd.t(), mx_specs=specs), blocks(xd, "fp4_e2m1", 1) @ blocks(wd.t(), "fp4_e2m1", 0))
