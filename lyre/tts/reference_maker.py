"""Reference voices made for one pipeline: whether its model continues a voice from a clip at all, a clip
SNAC-encoded on the codec's model, and the check that a voice's turn leaves a request room to speak."""

from __future__ import annotations

import re
import threading
from typing import Any

from lyre import orpheus
from lyre.models.choice import ModelChoice
from lyre.tts.clips import TrimmedClip
from lyre.tts.context import PROMPT_ROOM, PipelineContext
from lyre.tts.reference_voices import ReferenceRejected, ReferenceVoice, check_text
from lyre.tts.voices import Voices

__all__ = ["MIN_REPLY_TOKENS", "ReferenceMaker"]

# A reference voice must leave a request room for this much speech (about 5 s) beside its prompt.
MIN_REPLY_TOKENS = 7 * 60
# A model named like Orpheus's pretrained checkpoints was trained on text-speech pairs and continues a voice.
_PRETRAINED = re.compile(r"pretrain", re.IGNORECASE)


class ReferenceMaker:
    """Makes and checks reference voices for the pipeline whose parts ``context`` holds; ``voices`` (the
    model's, from its folder) and ``source`` (where the model came from; None: not known) say whether the
    model is one that continues a voice."""

    def __init__(self, context: PipelineContext, voices: Voices, source: ModelChoice | None) -> None:
        self._ctx = context
        self._voices = voices
        self._source = source
        self._encoder: Any = None  # a SnacEncoder on the codec's model, made with the first reference voice
        self._encoder_made = threading.Lock()

    def refused(self) -> str | None:
        """None when the pipeline speaks reference voices, else why not (naming the model)."""
        if self._ctx.config.allow_reference_voices or self._voices.reference_voices:
            return None
        model = self._source.model if self._source is not None else None
        if model is not None and (model.random or _PRETRAINED.search(model.name)):
            return None
        name = model.name if model is not None else "this model"
        return (f"model {name!r} is not known to continue a voice from a reference clip (Orpheus's pretrained "
                f"checkpoints are; a finetune says so in its voices.json with \"reference_voices\": true); start "
                f"the server with --allow-reference-voices to try it anyway")

    def check_allowed(self) -> None:
        """ReferenceRejected (the ``voice`` at fault) unless the pipeline speaks reference voices."""
        refused = self.refused()
        if refused is not None:
            raise ReferenceRejected(f"voice: {refused}", "voice")

    def make(self, name: str, clip: TrimmedClip, text: str, transcribed: bool = False) -> ReferenceVoice:
        """A reference voice from ``clip`` (`read_reference_clip`'s) saying ``text``: SNAC-encoded here, on the
        codec's model (blocking: run it on a worker thread). ReferenceRejected naming the field at fault."""
        from lyre.codec.encoder import SnacEncoder

        self.check_allowed()
        text = check_text(text, clip.seconds)
        with self._encoder_made:
            if self._encoder is None:
                self._encoder = SnacEncoder(self._ctx.codec.decoder.model)
        # Encodes run side by side (the codec's model is only read, as its decodes do meanwhile): an upload never
        # waits behind requests' own references, whose number the server bounds.
        frames = orpheus.without_repeated_frames(self._encoder.encode(clip.pcm))
        voice = ReferenceVoice(name, text, tuple(frames), round(clip.seconds, 3), transcribed)
        self.check_prompt(voice)
        return voice

    def check_prompt(self, voice: ReferenceVoice) -> None:
        """ReferenceRejected unless ``voice``'s turn is a prompt this server takes: text free of control tokens,
        and room beside it in a request's positions for a prompt and a reply."""
        positions = self._ctx.engine.config.max_seq_len
        room = positions - PROMPT_ROOM - MIN_REPLY_TOKENS
        try:
            used = len(voice.prefix_ids(self._ctx.tokenizer))
        except ValueError as exc:  # text that would be a control token of the prompt
            raise ReferenceRejected(f"text: {exc}", "text") from None
        if used > room:
            raise ReferenceRejected(f"file: the clip and its text take {used} prompt tokens; this server's requests "
                                    f"hold {positions} positions, which leaves room for {room} (use a shorter "
                                    f"clip, or start the server with a larger --max-seq-len)", "file")
