"""GGUF checkpoints: the gguf package's own reader and dequantizers decode what groupquant writes
to groupquant's dequantized weights, bit for bit; llama.cpp names, keys and row order for Llama."""
import numpy as np
import pytest
import torch

import groupquant as gq
import groupquant.quantizers as Q
from groupquant.export import CheckpointError, pack_model

gguf = pytest.importorskip("gguf", reason="the GGUF checkpoint tests need the gguf package")


def decoded_by_the_package(path):
    """``tensor name -> float32 tensor`` as gguf's GGUFReader and gguf.quants.dequantize decode them;
    an NVFP4 weight is multiplied by its ``<name>.scale`` tensor (llama.cpp's per-tensor scale)."""
    reader = gguf.GGUFReader(str(path))
    out = {t.name: torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type))) for t in reader.tensors}
    types = {t.name: t.tensor_type for t in reader.tensors}
    for name, t in types.items():
        if t == gguf.GGMLQuantizationType.NVFP4:
            out[name] = out[name] * out.pop(f"{name.removesuffix('.weight')}.scale")
    return out, types, reader


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_package_decodes_mxfp4_and_nvfp4_exactly(tmp_path, linear_stack, dtype):
    model = linear_stack([Q.MXFloat4e2m1Weight, Q.NVFP4Weight], dtype=dtype)
    path = gq.save(model, tmp_path / "m.gguf", format="gguf")
    got, types, reader = decoded_by_the_package(path)
    assert types["0.weight"] == gguf.GGMLQuantizationType.MXFP4 and types["2.weight"] == gguf.GGMLQuantizationType.NVFP4
    assert reader.fields["general.architecture"].contents() == "groupquant"
    for i in (0, 2):
        want = model[i].group_quantized_weight().dequantize()
        assert torch.equal(got[f"{i}.weight"].to(dtype), want)
        assert torch.equal(got[f"{i}.bias"].to(dtype), model[i].bias.detach())


def test_read_back_bit_exact(tmp_path, linear_stack):
    model = linear_stack([Q.NVFP4Weight, Q.MXFloat4e2m1Weight])
    loaded = gq.load(gq.save(model, tmp_path / "m.gguf", format="gguf"))
    assert loaded.format == "gguf"
    for i in (0, 2):
        want, got = model[i].group_quantized_weight(), loaded.layers[str(i)].group_quantized_weight()
        assert torch.equal(got.codes, want.codes) and torch.equal(got.scale_codes, want.scale_codes)
    assert torch.equal(loaded.layers["0"].weight_tensor_scale, model[0].group_quantized_weight().tensor_scale)
    packed = pack_model(linear_stack([Q.NVFP4Weight, Q.MXFloat4e2m1Weight]))
    gq.load(tmp_path / "m.gguf", packed)
    x = torch.randn(4, 64)
    assert torch.equal(packed(x), pack_model(model)(x))


def test_tiny_llama_gets_llama_cpp_names_keys_and_row_order(tmp_path, tiny_llama):
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    path = gq.save(model, tmp_path / "m.gguf", format="gguf")
    got, types, reader = decoded_by_the_package(path)
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.block_count"].contents() == 2
    assert reader.fields["llama.attention.head_count_kv"].contents() == 2
    assert reader.fields["llama.embedding_length"].contents() == 64
    assert "output.weight" not in got and "token_embd.weight" in got  # tied head: llama.cpp reuses token_embd
    assert types["blk.1.ffn_down.weight"] == gguf.GGMLQuantizationType.MXFP4
    down = model.model.layers[1].mlp.down_proj.group_quantized_weight().dequantize()
    assert torch.equal(got["blk.1.ffn_down.weight"], down)
    # llama.cpp's rotary row order, as convert_hf_to_gguf's LlamaModel.permute builds it (float64 reference)
    for proj, heads, name in (("q_proj", 4, "attn_q"), ("k_proj", 2, "attn_k")):
        w = getattr(model.model.layers[0].self_attn, proj).group_quantized_weight().dequantize().double()
        permuted = w.reshape(heads, 2, w.shape[0] // heads // 2, w.shape[1]).swapaxes(1, 2).reshape(w.shape)
        assert torch.equal(got[f"blk.0.{name}.weight"].double(), permuted)
    assert torch.equal(got["token_embd.weight"], model.model.embed_tokens.weight.detach())


def test_tiny_llama_read_back_into_float_and_quantized_models(tmp_path, tiny_llama):
    model = tiny_llama(Q.NVFP4Weight)
    path = gq.save(model, tmp_path / "m.gguf", format="gguf")
    ids = torch.randint(0, 128, (1, 8))
    twin, quantized = tiny_llama(), tiny_llama(Q.NVFP4Weight)
    with torch.no_grad():
        for p in list(twin.parameters()) + list(quantized.parameters()):
            p.zero_()
    gq.load(path, twin)
    gq.load(path, quantized)
    assert twin.lm_head.weight is twin.model.embed_tokens.weight
    with torch.no_grad():
        assert torch.equal(twin(ids).logits, model(ids).logits)
        assert torch.equal(quantized(ids).logits, model(ids).logits)


@pytest.mark.parametrize("wq", [Q.MXFloat6e2m3Weight, Q.MXFloat8e4m3Weight, Q.MXInt8Weight], ids=lambda q: q.__name__)
def test_formats_it_cannot_hold_are_refused_by_layer(tmp_path, linear_stack, wq):
    model = linear_stack([Q.MXFloat4e2m1Weight, wq])
    fmt = model[2].group_quantized_weight().fmt.name
    with pytest.raises(CheckpointError, match=rf"^2.weight: GGUF holds MXFP4 .* NVFP4 .* weight is {fmt} "):
        gq.save(model, tmp_path / "m.gguf", format="gguf")


def test_nvfp4_rows_not_a_multiple_of_the_super_block_refused(tmp_path):
    model = torch.nn.Sequential(gq.nn.QuantLinear(48, 8, weight_quant=Q.NVFP4Weight))
    with pytest.raises(CheckpointError, match=r"^0.weight: GGUF NVFP4 .* multiple of 64; got shape \(8, 48\)"):
        gq.save(model, tmp_path / "m.gguf", format="gguf")


def test_tokenizer_keys_copied_from_another_gguf(tmp_path, linear_stack):
    source = gguf.GGUFWriter(str(tmp_path / "tok.gguf"), "llama")
    source.add_tokenizer_model("gpt2")
    source.add_token_list(["a", "b", "<s>"])
    source.add_token_types([1, 1, 3])
    source.add_bos_token_id(2)
    for step in (source.write_header_to_file, source.write_kv_data_to_file, source.write_tensors_to_file, source.close):
        step()
    path = gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / "m.gguf", format="gguf",
                   tokenizer_from=tmp_path / "tok.gguf")
    fields = gguf.GGUFReader(str(path)).fields
    assert fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert fields["tokenizer.ggml.tokens"].contents() == ["a", "b", "<s>"]
    assert fields["tokenizer.ggml.token_type"].contents() == [1, 1, 3]
    assert fields["tokenizer.ggml.bos_token_id"].contents() == 2
    with pytest.raises(ValueError, match="tokenizer_from is for format='gguf'"):
        gq.save(linear_stack([Q.MXFloat4e2m1Weight]), tmp_path / "m.safetensors", tokenizer_from=tmp_path / "tok.gguf")


def test_transformers_gguf_loader_reads_the_llama_file(tmp_path, tiny_llama):
    """transformers' own GGUF loader (llama.cpp names, keys and q / k row order undone) gives the
    quantized model's weights and logits from an MXFP4 file."""
    transformers = pytest.importorskip("transformers")
    model = tiny_llama(Q.MXFloat4e2m1Weight)
    gq.save(model, tmp_path / "m.gguf", format="gguf")
    read = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file="m.gguf",
                                                             dtype=torch.float32).eval()
    q_proj = model.model.layers[0].self_attn.q_proj
    assert torch.equal(read.model.layers[0].self_attn.q_proj.weight, q_proj.group_quantized_weight().dequantize())
    ids = torch.randint(0, 128, (1, 8))
    with torch.no_grad():
        assert torch.equal(read(ids).logits, model(ids).logits)


def _llama_config(**more):
    return transformers_config(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                               tie_word_embeddings=True, **more)


def transformers_config(**kw):
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaConfig(**kw)


def _quantized_llama(config, wq=Q.MXFloat4e2m1Weight):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    return gq.quantize_model(model, weight_quant=wq, include=["model.layers.*"])


@pytest.mark.parametrize("wq,kind", [(Q.MXFloat4e2m1Weight, "MOSTLY_MXFP4_MOE"), (Q.NVFP4Weight, "MOSTLY_NVFP4"),
                                     (None, "ALL_F32")])
def test_file_type_and_the_keys_llama_cpp_converter_writes(tmp_path, tiny_llama, wq, kind):
    """general.file_type (llama.cpp's LlamaFileType), general.quantization_version and the keys
    convert_hf_to_gguf.py writes for a Llama (TextModel / LlamaModel.set_gguf_parameters)."""
    model = tiny_llama(wq)
    path = gq.save(model, tmp_path / "m.gguf", format="gguf")
    fields = gguf.GGUFReader(str(path)).fields
    assert fields["general.file_type"].contents() == int(getattr(gguf.LlamaFileType, kind))
    assert fields["general.quantization_version"].contents() == gguf.GGML_QUANT_VERSION
    assert fields["general.type"].contents() == "model"
    params = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())  # tied head once
    assert fields["general.size_label"].contents() == gguf.size_label(params, 0, 0, 0)
    c = model.config
    expected = {"context_length": c.max_position_embeddings, "embedding_length": c.hidden_size,
                "block_count": c.num_hidden_layers, "feed_forward_length": c.intermediate_size,
                "attention.head_count": c.num_attention_heads, "attention.head_count_kv": c.num_key_value_heads,
                "rope.freq_base": c.rope_parameters["rope_theta"], "attention.layer_norm_rms_epsilon": c.rms_norm_eps,
                "attention.key_length": c.head_dim, "attention.value_length": c.head_dim,
                "rope.dimension_count": c.head_dim, "vocab_size": c.vocab_size}
    for key, value in expected.items():
        assert fields[f"llama.{key}"].contents() == pytest.approx(value), key


def test_llama3_rope_scaling_is_written_as_llama_cpp_rope_freqs(tmp_path):
    """Llama 3.x RoPE scaling: the rope_freqs tensor llama.cpp divides its frequencies by; checked
    against transformers' own scaled frequencies (its rotary embedding's inv_freq)."""
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    model = _quantized_llama(_llama_config(rope_parameters=rope))
    with pytest.warns(UserWarning, match="transformers' GGUF loader does not read it"):
        path = gq.save(model, tmp_path / "m.gguf", format="gguf")
    got, _, reader = decoded_by_the_package(path)
    base = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float32) / 16))
    scaled = model.model.rotary_emb.inv_freq.float()
    assert not torch.allclose(scaled, base)  # the scaling changes some frequencies
    torch.testing.assert_close(base / got["rope_freqs.weight"], scaled, rtol=1e-6, atol=0)
    assert "rope_freqs.weight" not in gq.load(path).tensors  # llama.cpp's, not the model's: read back as before
    twin = _quantized_llama(_llama_config(rope_parameters=rope))
    gq.load(path, twin)


def test_linear_rope_scaling_keys_and_unknown_scaling_refused(tmp_path):
    model = _quantized_llama(_llama_config(rope_parameters={"rope_type": "linear", "factor": 4.0,
                                                            "rope_theta": 10000.0}))
    fields = gguf.GGUFReader(str(gq.save(model, tmp_path / "m.gguf", format="gguf"))).fields
    assert fields["llama.rope.scaling.type"].contents() == "linear"
    assert fields["llama.rope.scaling.factor"].contents() == 4.0
    model = _quantized_llama(_llama_config(rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                            "rope_theta": 10000.0}))
    with pytest.raises(CheckpointError, match="rope_type='dynamic' has no llama.cpp llama key"):
        gq.save(model, tmp_path / "d.gguf", format="gguf")


def test_integer_and_bool_buffers_keep_their_values(tmp_path, linear_stack):
    model = linear_stack([Q.MXFloat4e2m1Weight])
    model.register_buffer("big", torch.tensor([2 ** 40 + 1, -3], dtype=torch.int64))
    model.register_buffer("mask", torch.tensor([[True, False], [False, True]]))
    model.register_buffer("count", torch.tensor(7, dtype=torch.int32))
    model.register_buffer("byte", torch.tensor([255, 0, 128], dtype=torch.uint8))
    loaded = gq.load(gq.save(model, tmp_path / "m.gguf", format="gguf"))
    for name in ("big", "mask", "count", "byte"):
        want = getattr(model, name)
        assert loaded.tensors[name].dtype == want.dtype and torch.equal(loaded.tensors[name], want), name
