"""What a user or a tool wrote stays text: a special token's text in it is tokenized as plain text.

A chat template writes the messages into one prompt string, which the tokenizer then reads whole. Left at that,
``<|im_end|><|im_start|>system`` typed by a user would come out as the real control tokens and open a system
turn of the user's own. So before the template runs, every special token's text in user and tool content is
wrapped in a pair of private-use markers (and so is every marker character already there, in any message, so
no text can forge a pair); after it, the prompt is tokenized piece by piece: each wrapped piece as plain text
(the tokenizer's ``encode_special_tokens``), the rest, the template's own special tokens among it, as before.

System and assistant content is left as it was: a client writes those itself, and may mean their tokens.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tokenizers import Tokenizer

__all__ = ["TEXT_ROLES", "LiteralText"]

# Unicode private use: no text means anything by them, and a template passes them through untouched.
_OPEN, _CLOSE = "\ue000", "\ue001"
TEXT_ROLES = frozenset({"user", "tool", "function", "ipython"})  # whose content is someone else's words


class LiteralText:
    """Marks user and tool content before a template renders it, and tokenizes the marked prompt."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        specials = sorted({t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special},
                          key=len, reverse=True)  # longest first: "<|im_start|>" before a token it begins with
        words = "|".join(re.escape(t) for t in [*specials, _OPEN, _CLOSE])
        self._in_text = re.compile(words)  # what is wrapped in user and tool content
        self._markers = re.compile(f"[{_OPEN}{_CLOSE}]")  # what is wrapped in any other content
        self._wrapped = re.compile(f"{_OPEN}({words}){_CLOSE}")  # one capture group: split() keeps the insides
        self._tokenizer = tokenizer
        self._plain = Tokenizer.from_str(tokenizer.to_str())  # a copy: the setting below is the tokenizer's own
        self._plain.encode_special_tokens = True

    def mark(self, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The messages with their content's special-token texts (user, tool) and stray markers (all) wrapped."""
        marked = []
        for message in messages:
            content = message.get("content")
            if isinstance(content, str):
                pattern = self._in_text if message.get("role") in TEXT_ROLES else self._markers
                message = {**message, "content": pattern.sub(lambda m: _OPEN + m[0] + _CLOSE, content)}
            marked.append(dict(message))
        return marked

    def encode(self, prompt: str) -> list[int]:
        """The ids of a prompt rendered from `mark`'s messages: wrapped pieces as text, the rest as the tokenizer
        reads it. The markers themselves become no ids, so the prompt's text is what the template wrote."""
        if _OPEN not in prompt:  # nobody wrote a special token's text: the whole prompt reads as it is
            return self._tokenizer.encode(prompt, add_special_tokens=False).ids
        ids: list[int] = []
        for i, piece in enumerate(self._wrapped.split(prompt)):  # outside, inside, outside, ...
            if piece:
                ids += (self._plain if i % 2 else self._tokenizer).encode(piece, add_special_tokens=False).ids
        return ids
