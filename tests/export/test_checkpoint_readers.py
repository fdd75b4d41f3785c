"""The checkpoints groupquant writes, loaded by the other engines' own readers with their default
settings: transformers' ``AutoModelForCausalLM.from_pretrained(folder)`` on a compressed-tensors
folder (the compressed-tensors package decodes it), transformers' GGUF loader, and llama.cpp
(``llama-cpp-python``) where it is installed. Tiny random Llamas written from float32."""
import numpy as np
import pytest
import torch

import groupquant as gq
import groupquant.quantizers as Q

transformers = pytest.importorskip("transformers")
IDS = torch.randint(0, 128, (1, 10), generator=torch.Generator().manual_seed(2))


def _logits(model, ids=IDS):
    with torch.no_grad():
        return model(ids).logits


@pytest.mark.parametrize("wq", [Q.MXFloat4e2m1Weight, Q.NVFP4Weight], ids=["mxfp4", "nvfp4"])
def test_transformers_default_load_of_compressed_tensors_runs(tmp_path, tiny_llama, wq):
    """No dtype, no CompressedTensorsConfig: the config's dtype (bfloat16, what compressed-tensors
    decodes FP4 to) makes the model run; its weights are groupquant's rounded to bfloat16 (the float
    twin holding groupquant's dequantized weights, cast), and it computes groupquant's model in bfloat16."""
    pytest.importorskip("compressed_tensors")
    model = tiny_llama(wq)
    model.config.dtype = torch.float32  # as from_pretrained(..., dtype=torch.float32) records it
    gq.save(model, tmp_path / "ckpt", format="compressed-tensors")
    read = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt")).eval()
    got = _logits(read)  # the first forward decompresses the weights
    assert got.dtype == torch.bfloat16
    twin = gq.load(tmp_path / "ckpt", tiny_llama())
    weights = dict(read.named_parameters())
    for name, w in twin.named_parameters():
        assert torch.equal(weights[name], w.detach().to(torch.bfloat16)), name
    torch.testing.assert_close(got.float(), _logits(model), atol=0.05, rtol=0.05)  # bfloat16 compute
    assert gq.load(tmp_path / "ckpt").config["dtype"] == "float32"  # the model's own, read back


def test_transformers_default_gguf_load_computes_groupquants_model(tmp_path, tiny_llama):
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    gq.save(model, tmp_path / "m.gguf", format="gguf")
    read = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf").eval()
    assert torch.equal(_logits(read), _logits(model))


def test_llama_cpp_runs_the_gguf_file(tmp_path):
    """llama.cpp itself (llama-cpp-python, optional: it compiles llama.cpp): a tiny Llama with SmolLM2's
    vocabulary and tokenizer keys, MXFP4 and NVFP4 projections; llama.cpp's logits against groupquant's."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (optional)")
    from groupquant.llm import smollm2_gguf_path
    try:
        source = smollm2_gguf_path()
    except ImportError as e:
        pytest.skip(str(e))
    for wq in (Q.MXFloat4e2m1Weight, Q.NVFP4Weight):
        config = transformers.LlamaConfig(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          tie_word_embeddings=True)
        torch.manual_seed(0)
        model = gq.quantize_model(transformers.LlamaForCausalLM(config).eval(), weight_quant=wq,
                                  include=["model.layers.*"])
        path = gq.save(model, tmp_path / f"{wq.__name__}.gguf", format="gguf", tokenizer_from=source)
        llm = llama_cpp.Llama(model_path=str(path), n_ctx=64, logits_all=True, verbose=False)
        ids = [1, 200, 3000, 45, 7, 9000, 12]
        llm.eval(ids)
        got = torch.from_numpy(np.array(llm.scores[:len(ids)], dtype=np.float32))
        torch.testing.assert_close(got, _logits(model, torch.tensor([ids]))[0], atol=2e-2, rtol=2e-2)
