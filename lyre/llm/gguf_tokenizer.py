"""A ``tokenizers`` Tokenizer rebuilt from a GGUF file's ``tokenizer.ggml.*`` metadata.

GGUF keeps a byte-level BPE tokenizer as its vocabulary, its merges, each
token's type and the name of its pre-tokenizer (``tokenizer.ggml.pre``), which
llama.cpp maps to a splitting regex. Only the pre-tokenizers named here are
rebuilt; any other is refused rather than guessed, since a wrong split gives a
model token sequences it never saw in training.
"""

from __future__ import annotations

import gguf
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

from lyre.models.gguf import GGUFError, metadata

__all__ = ["PRE_TOKENIZERS", "gguf_tokenizer"]

# GPT-2's split, as Hugging Face's ByteLevel pre-tokenizer applies it itself.
_GPT2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
# Llama 3's split (llama.cpp's "llama-bpe"): digits in threes, letters with one leading symbol.
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# tokenizer.ggml.pre -> the Hugging Face pre-tokenizer llama.cpp's regex for it stands for.
PRE_TOKENIZERS: dict[str, pre_tokenizers.PreTokenizer] = {
    "default": _GPT2,
    "gpt2": _GPT2,
    # SmolLM: every digit alone, then GPT-2's split.
    "smollm": pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _GPT2]),
    "llama-bpe": pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]),
}


def gguf_tokenizer(reader: gguf.GGUFReader) -> Tokenizer:
    """The file's tokenizer: its embedded tokenizer.json if it has one, else rebuilt from its BPE metadata."""
    embedded = metadata(reader, gguf.Keys.Tokenizer.HF_JSON)
    if embedded:
        return Tokenizer.from_str(embedded)
    kind = metadata(reader, gguf.Keys.Tokenizer.MODEL)
    if kind != "gpt2":
        raise GGUFError(f"tokenizer.ggml.model is {kind!r}; only byte-level BPE ('gpt2') is rebuilt from GGUF "
                        "metadata: put the model's tokenizer.json beside the .gguf file")
    pre = metadata(reader, gguf.Keys.Tokenizer.PRE, "default")
    if pre not in PRE_TOKENIZERS:
        raise GGUFError(f"tokenizer.ggml.pre {pre!r} is not one lyre rebuilds ({', '.join(PRE_TOKENIZERS)}): "
                        "put the model's tokenizer.json beside the .gguf file")
    tokens: list[str] = metadata(reader, gguf.Keys.Tokenizer.LIST)
    types: list[int] = metadata(reader, gguf.Keys.Tokenizer.TOKEN_TYPE, [gguf.TokenType.NORMAL] * len(tokens))
    merges: list[str] = metadata(reader, gguf.Keys.Tokenizer.MERGES, [])
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)  # a repeated string keeps its first id, as llama.cpp does
    pairs = [tuple(merge.split(" ", 1)) for merge in merges]
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer = PRE_TOKENIZERS[pre]
    tokenizer.decoder = decoders.ByteLevel()
    # Control tokens (<|im_start|>, ...) are matched whole in text and skipped when decoding
    # with skip_special_tokens; user-defined ones are matched whole and kept.
    added = [
        AddedToken(token, special=kind == gguf.TokenType.CONTROL, normalized=False)
        for token, kind in zip(tokens, types)
        if kind in (gguf.TokenType.CONTROL, gguf.TokenType.USER_DEFINED)
    ]
    tokenizer.add_tokens(added)
    return tokenizer
