"""A tiny random Llama folder (save_pretrained, with a word-level tokenizer built offline) for the
language-model workflow's tests."""
import re

import pytest
import torch


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory):
    """``(folder, model, tokenizer)``: a 2-layer random LlamaForCausalLM (hidden 64, tied head) and a
    126-word tokenizer of Python's json docstrings, saved in one folder."""
    transformers = pytest.importorskip("transformers", reason="the llm workflow needs the llm extra (transformers)")
    tokenizers = pytest.importorskip("tokenizers")
    from groupquant.eval import python_docstrings

    words = re.findall(r"\w+|[^\w\s]", " ".join(python_docstrings(("json",))))
    vocab = {"[UNK]": 0, "</s>": 1}
    for word in sorted(set(words), key=lambda w: (-words.count(w), w))[:126]:
        vocab.setdefault(word, len(vocab))
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="</s>")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      tie_word_embeddings=True, eos_token_id=1, bos_token_id=1, pad_token_id=1)
    model = transformers.LlamaForCausalLM(config).eval()
    folder = tmp_path_factory.mktemp("llama")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder, model, tok
