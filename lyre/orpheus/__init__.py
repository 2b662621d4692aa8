"""The Orpheus TTS token format: prompt layout, audio tokens and SNAC frames.

Orpheus is a Llama-3 backbone that writes SNAC 24 kHz codec codes as extra
vocabulary entries. Every frame is 7 tokens, one per frame position; the token
for code ``c`` at position ``k`` is ``AUDIO_TOKEN_BASE + CODEBOOK_SIZE * k + c``.
Everything here is pure Python (no torch, no I/O) so the engine, the codec
and the tests share one definition of the format.

- `ids`: the control tokens, rates, voices and tags;
- `frames`: audio tokens, frames and SNAC's levels;
- `prompts`: the prompt layout.
"""

from lyre.orpheus.frames import (FrameAssembler, InvalidAudioToken, audio_seconds, audio_token, codes_to_snac_levels,
                                 frame_codes, frames_to_snac_codes, parse_audio_token, position_range,
                                 snac_codes_to_frames, without_repeated_frames)
from lyre.orpheus.ids import (AUDIO_TOKEN_BASE, BOS, CODEBOOK_SIZE, CUSTOM_TOKEN_BASE, EMOTIVE_TAGS, END_OF_AI,
                              END_OF_HUMAN, END_OF_SPEECH, EOT, FRAME_SECONDS, FRAME_TOKENS, PAD, SAMPLE_RATE,
                              SAMPLES_PER_FRAME, START_OF_AI, START_OF_HUMAN, START_OF_SPEECH, STOP_TOKEN,
                              TOKENS_PER_SECOND, VOICES)
from lyre.orpheus.prompts import TextTokenizer, prompt_ids, reference_ids

__all__ = [
    "AUDIO_TOKEN_BASE",
    "BOS",
    "CODEBOOK_SIZE",
    "CUSTOM_TOKEN_BASE",
    "EMOTIVE_TAGS",
    "END_OF_AI",
    "END_OF_HUMAN",
    "END_OF_SPEECH",
    "EOT",
    "FRAME_SECONDS",
    "FRAME_TOKENS",
    "PAD",
    "SAMPLES_PER_FRAME",
    "SAMPLE_RATE",
    "START_OF_AI",
    "START_OF_HUMAN",
    "START_OF_SPEECH",
    "STOP_TOKEN",
    "TOKENS_PER_SECOND",
    "VOICES",
    "FrameAssembler",
    "InvalidAudioToken",
    "TextTokenizer",
    "audio_seconds",
    "audio_token",
    "frame_codes",
    "codes_to_snac_levels",
    "frames_to_snac_codes",
    "parse_audio_token",
    "position_range",
    "prompt_ids",
    "reference_ids",
    "snac_codes_to_frames",
    "without_repeated_frames",
]
