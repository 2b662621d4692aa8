"""Orpheus's prompts: a voice asked to say a text, and a reference turn (a speaker saying a text, as audio
tokens) that a zero-shot prompt opens with. Ids are built directly, never decoded and re-tokenized."""

from collections.abc import Sequence
from typing import Protocol

from lyre.orpheus.frames import audio_token
from lyre.orpheus.ids import (BOS, END_OF_AI, END_OF_HUMAN, END_OF_SPEECH, EOT, FRAME_TOKENS, START_OF_AI,
                             START_OF_HUMAN, START_OF_SPEECH)

__all__ = ["TextTokenizer", "prompt_ids", "reference_ids"]


class _Encoding(Protocol):
    @property
    def ids(self) -> list[int]: ...


class TextTokenizer(Protocol):
    """What `prompt_ids` needs from a tokenizer (a `tokenizers.Tokenizer` fits)."""

    def encode(self, sequence: str, /, *, add_special_tokens: bool) -> _Encoding: ...


def _text_ids(tokenizer: TextTokenizer, text: str) -> list[int]:
    # Without special tokens, so BOS appears exactly once whatever the
    # tokenizer's post-processor would add.
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    control = [i for i in ids if i >= BOS]
    if control:
        raise ValueError(f"text must not contain control tokens, found ids {control}")
    return ids


def prompt_ids(
    tokenizer: TextTokenizer, text: str, voice: str | None = None
) -> list[int]:
    """Token ids of the Orpheus prompt asking ``voice`` to say ``text``.

    Layout: START_OF_HUMAN, BOS, ids of "voice: text" (or of text alone when
    ``voice`` is None), EOT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH.
    Text that encodes to a control token (e.g. a literal "<|eot_id|>") is
    rejected, since it would let the text rewrite the prompt's structure.
    """
    if not text.strip():
        raise ValueError("text must not be empty or whitespace")
    if voice is not None and not voice.strip():
        raise ValueError("voice must be None or a non-empty name")
    spoken = text if voice is None else f"{voice}: {text}"
    ids = _text_ids(tokenizer, spoken)
    return [START_OF_HUMAN, BOS, *ids, EOT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]


def reference_ids(
    tokenizer: TextTokenizer, text: str, frames: Sequence[Sequence[int]]
) -> list[int]:
    """Token ids of a reference turn: a speaker saying ``text`` as ``frames`` (7 codes each), the
    text-speech pair a zero-shot prompt opens with.

    Layout: START_OF_HUMAN, BOS, ids of text, EOT, END_OF_HUMAN, START_OF_AI,
    START_OF_SPEECH, the frames' audio tokens, END_OF_SPEECH, END_OF_AI.
    A `prompt_ids` prompt without a voice follows it, and the model carries
    on in the reference's voice. The frames are used as given.
    """
    if not text.strip():
        raise ValueError("reference text must not be empty or whitespace")
    if not frames:
        raise ValueError("a reference needs at least one frame of audio")
    if any(len(frame) != FRAME_TOKENS for frame in frames):
        raise ValueError(f"every reference frame is {FRAME_TOKENS} codes")
    audio = [audio_token(k, c) for frame in frames for k, c in enumerate(frame)]
    return [START_OF_HUMAN, BOS, *_text_ids(tokenizer, text), EOT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH,
            *audio, END_OF_SPEECH, END_OF_AI]
