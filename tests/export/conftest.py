"""Fixtures for the export tests: run a graph in onnxruntime, compare float tensors bit for bit."""
import numpy as np
import pytest
import torch


def run_graph(builder, x: torch.Tensor, out: str) -> torch.Tensor:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    shape = [None] + list(x.shape[1:])  # dynamic batch
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)]
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT, [None] * x.dim())]
    model = builder.model(inputs, outputs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # default: all optimizations
    (y,) = session.run(None, {"x": x.numpy()})
    return torch.from_numpy(np.asarray(y))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical float32 tensors, except that any NaN equals any NaN."""
    a, b = a.float().contiguous(), b.float().contiguous()
    if a.shape != b.shape:
        return False
    nan = torch.isnan(a)
    if not torch.equal(nan, torch.isnan(b)):
        return False
    return torch.equal(a.view(torch.int32)[~nan], b.view(torch.int32)[~nan])


@pytest.fixture
def ort_run():
    """``ort_run(builder, x, out)``: run a one-input graph (input 'x', dynamic batch) in onnxruntime."""
    pytest.importorskip("onnxruntime")
    return run_graph


@pytest.fixture
def bits_equal():
    """``bits_equal(a, b)``: float32 bit equality, any NaN equal to any NaN."""
    return same_bits


def spread_over_binades(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Scale each weight row by 2**k, k in [-10, 10) (seeded), so blocks span many binades; returns the model."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            w = getattr(m, "weight", None)
            if isinstance(w, torch.nn.Parameter) and w.dim() == 2:
                k = torch.randint(-10, 10, (w.shape[0], 1), generator=gen).float()
                w.mul_(torch.exp2(k).to(w.dtype))
    return model


@pytest.fixture
def linear_stack():
    """``linear_stack(weight_quants, dtype=float32, features=64)``: an ``nn.Sequential`` of
    QuantLinear layers (one per weight quantizer, bias on, ReLU between) with weights spanning binades."""
    from groupquant.nn import QuantLinear

    def make(weight_quants, dtype=torch.float32, features=64):
        torch.manual_seed(0)
        layers = []
        for i, wq in enumerate(weight_quants):
            layers += [QuantLinear(features, features, weight_quant=wq, dtype=dtype), torch.nn.ReLU()]
        return spread_over_binades(torch.nn.Sequential(*layers[:-1])).eval()
    return make


@pytest.fixture
def tiny_llama():
    """``tiny_llama(weight_quant=None, dtype=float32)``: a random 2-layer LlamaForCausalLM (hidden 64,
    4 heads, 2 KV heads, tied embeddings); with ``weight_quant`` its decoder projections are quantized."""
    transformers = pytest.importorskip("transformers", reason="the tiny Llama tests need transformers")

    def make(weight_quant=None, dtype=torch.float32):
        import groupquant as gq
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          tie_word_embeddings=True)
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
        spread_over_binades(model.model.layers)
        if weight_quant is not None:
            gq.quantize_model(model, weight_quant=weight_quant, include=["model.layers.*"])
        return model
    return make
