"""The module forms compute exactly what the functional ops compute, in the input's dtype."""
import torch

from groupquant import elementwise as ew


def test_modules_equal_the_functional_ops():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 32, generator=g) * 3
    assert torch.equal(ew.Softmax(-1)(x), ew.softmax(x, -1))
    assert torch.equal(ew.GELU("tanh")(x), ew.gelu(x, "tanh"))
    for module, fn in ((ew.SiLU(), ew.silu), (ew.Sigmoid(), ew.sigmoid), (ew.Tanh(), ew.tanh), (ew.ReLU(), ew.relu)):
        assert torch.equal(module(x), fn(x))
    ln = ew.LayerNorm(32)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
    assert torch.equal(ln(x), ew.layer_norm(x, (32,), ln.weight, ln.bias, ln.eps))
    rms = ew.RMSNorm(32, precision="fp16")
    assert torch.equal(rms(x), ew.rms_norm(x, (32,), rms.weight, 1e-6, precision="fp16"))
    gn = ew.GroupNorm(3, 6)
    assert torch.equal(gn(x), ew.group_norm(x, 3, gn.weight, gn.bias, gn.eps))
    assert ew.Softmax(-1)(x.bfloat16()).dtype == torch.bfloat16
    assert not torch.equal(ew.Softmax(-1, precision="e5m2")(x), ew.Softmax(-1)(x))
