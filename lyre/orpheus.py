"""The Orpheus TTS token format: prompt layout, audio tokens and SNAC frames.

Orpheus is a Llama-3 backbone that writes SNAC 24 kHz codec codes as extra
vocabulary entries. Every frame is 7 tokens, one per frame position; the token
for code ``c`` at position ``k`` is ``AUDIO_TOKEN_BASE + CODEBOOK_SIZE * k + c``.
Everything here is pure Python (no torch, no I/O) so the engine, the codec
and the tests share one definition of the format.
"""

from collections.abc import Sequence
from typing import Protocol

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

# Llama-3 special tokens. Every id from BOS up is a control token, never text.
BOS = 128000  # <|begin_of_text|>
EOT = 128009  # <|eot_id|>

# Orpheus adds `<custom_token_N>` with id CUSTOM_TOKEN_BASE + N.
CUSTOM_TOKEN_BASE = 128256
START_OF_SPEECH = 128257  # <custom_token_1>
END_OF_SPEECH = 128258  # <custom_token_2>
START_OF_HUMAN = 128259  # <custom_token_3>
END_OF_HUMAN = 128260  # <custom_token_4>
START_OF_AI = 128261  # <custom_token_5>
END_OF_AI = 128262  # <custom_token_6>
PAD = 128263  # <custom_token_7>
STOP_TOKEN = END_OF_SPEECH
AUDIO_TOKEN_BASE = 128266  # <custom_token_10>: code 0 at frame position 0

CODEBOOK_SIZE = 4096
FRAME_TOKENS = 7
SAMPLE_RATE = 24000
SAMPLES_PER_FRAME = 2048  # one coarse SNAC frame: 85.33 ms
FRAME_SECONDS = SAMPLES_PER_FRAME / SAMPLE_RATE
# Tokens the model must emit per second of audio to keep up with playback.
TOKENS_PER_SECOND = FRAME_TOKENS * SAMPLE_RATE / SAMPLES_PER_FRAME  # ~82.03

# One past the last audio token (position 6, code 4095).
_AUDIO_TOKEN_END = AUDIO_TOKEN_BASE + FRAME_TOKENS * CODEBOOK_SIZE

# Frame positions feeding each SNAC level, in order. Level 0 is coarsest (one
# code per frame); each finer level doubles the temporal resolution, and a
# frame lists its codes depth-first: 0, 1a, 2a, 2b, 1b, 2c, 2d.
_LEVEL_POSITIONS = ((0,), (1, 4), (2, 3, 5, 6))

VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
EMOTIVE_TAGS = (
    "<laugh>",
    "<chuckle>",
    "<sigh>",
    "<cough>",
    "<sniffle>",
    "<groan>",
    "<yawn>",
    "<gasp>",
)


class _Encoding(Protocol):
    @property
    def ids(self) -> list[int]: ...


class TextTokenizer(Protocol):
    """What `prompt_ids` needs from a tokenizer (a `tokenizers.Tokenizer` fits)."""

    def encode(self, sequence: str, /, *, add_special_tokens: bool) -> _Encoding: ...


class InvalidAudioToken(ValueError):
    """A token id that is not an audio token valid where it appeared.

    ``position`` is the frame position the token was checked against, or
    None when any audio token would have done.
    """

    def __init__(self, token: int, position: int | None = None) -> None:
        self.token = token
        self.position = position
        if position is None:
            where = "is not an audio token"
            allowed = range(AUDIO_TOKEN_BASE, _AUDIO_TOKEN_END)
        else:
            where = f"is not valid at frame position {position}"
            allowed = position_range(position)
        super().__init__(
            f"token {token} {where}; allowed range is "
            f"[{allowed.start}, {allowed.stop})"
        )


def position_range(position: int) -> range:
    """The `CODEBOOK_SIZE` token ids allowed at frame position ``position``."""
    if not 0 <= position < FRAME_TOKENS:
        raise ValueError(f"position must be in [0, {FRAME_TOKENS}), got {position}")
    start = AUDIO_TOKEN_BASE + CODEBOOK_SIZE * position
    return range(start, start + CODEBOOK_SIZE)


def audio_token(position: int, code: int) -> int:
    """The token id for SNAC ``code`` at frame ``position``."""
    allowed = position_range(position)
    if not 0 <= code < CODEBOOK_SIZE:
        raise ValueError(f"code must be in [0, {CODEBOOK_SIZE}), got {code}")
    return allowed.start + code


def parse_audio_token(token: int, position: int | None = None) -> tuple[int, int]:
    """Split an audio token into ``(position, code)``.

    With ``position`` given, the token must belong to that frame position;
    otherwise any audio token is accepted. Raises `InvalidAudioToken`.
    """
    if position is not None:
        if token not in position_range(position):
            raise InvalidAudioToken(token, position)
    elif not AUDIO_TOKEN_BASE <= token < _AUDIO_TOKEN_END:
        raise InvalidAudioToken(token)
    return divmod(token - AUDIO_TOKEN_BASE, CODEBOOK_SIZE)


def frame_codes(tokens: Sequence[int]) -> tuple[int, ...]:
    """Validate one 7-token frame and return its 7 codes in frame order."""
    if len(tokens) != FRAME_TOKENS:
        raise ValueError(f"a frame is {FRAME_TOKENS} tokens, got {len(tokens)}")
    return tuple(parse_audio_token(t, k)[1] for k, t in enumerate(tokens))


def frames_to_snac_codes(
    frames: Sequence[Sequence[int]],
) -> tuple[list[int], list[int], list[int]]:
    """Regroup n frames of audio tokens into SNAC's three code levels.

    Returns level 0 (n codes), level 1 (2n: per frame positions 1, 4) and
    level 2 (4n: per frame positions 2, 3, 5, 6), the layout SNAC decodes.
    """
    return codes_to_snac_levels([frame_codes(frame) for frame in frames])


def codes_to_snac_levels(
    frames: Sequence[Sequence[int]],
) -> tuple[list[int], list[int], list[int]]:
    """Like `frames_to_snac_codes`, for frames already turned into 7 codes each
    (as `FrameAssembler.push` returns them)."""
    levels: tuple[list[int], list[int], list[int]] = ([], [], [])
    for codes in frames:
        for level, positions in zip(levels, _LEVEL_POSITIONS):
            level.extend(codes[k] for k in positions)
    return levels


def snac_codes_to_frames(
    l0: Sequence[int], l1: Sequence[int], l2: Sequence[int]
) -> list[tuple[int, ...]]:
    """Inverse of `frames_to_snac_codes`: SNAC code levels to audio token frames."""
    n = len(l0)
    levels = (l0, l1, l2)
    for i, (level, positions) in enumerate(zip(levels, _LEVEL_POSITIONS)):
        if len(level) != len(positions) * n:
            raise ValueError(
                f"level {i} must hold {len(positions) * n} codes for "
                f"{n} frames, got {len(level)}"
            )
        for j, code in enumerate(level):
            if not 0 <= code < CODEBOOK_SIZE:
                raise ValueError(
                    f"level {i} code {j} is {code}, not in [0, {CODEBOOK_SIZE})"
                )
    frames = []
    for f in range(n):
        codes = [0] * FRAME_TOKENS
        for level, positions in zip(levels, _LEVEL_POSITIONS):
            width = len(positions)
            for m, k in enumerate(positions):
                codes[k] = level[f * width + m]
        frames.append(tuple(audio_token(k, c) for k, c in enumerate(codes)))
    return frames


class FrameAssembler:
    """Collects a stream of audio tokens into frames, checking each on arrival.

    Feed tokens after START_OF_SPEECH and stop on `STOP_TOKEN` yourself; a
    trailing partial frame is never returned, as SNAC cannot decode it.
    """

    def __init__(self) -> None:
        self._codes: list[int] = []
        self._frames = 0

    def push(self, token: int) -> tuple[int, ...] | None:
        """Add one token; return the frame's 7 codes when it completes a frame.

        Raises `InvalidAudioToken`, leaving the state unchanged, when the
        token does not belong at the current frame position.
        """
        _, code = parse_audio_token(token, len(self._codes))
        self._codes.append(code)
        if len(self._codes) < FRAME_TOKENS:
            return None
        frame = tuple(self._codes)
        self._codes.clear()
        self._frames += 1
        return frame

    @property
    def frames(self) -> int:
        """Number of frames completed so far."""
        return self._frames

    @property
    def pending(self) -> int:
        """Number of tokens in the current partial frame (0..6)."""
        return len(self._codes)


def audio_seconds(n_frames: int) -> float:
    """Duration of ``n_frames`` decoded frames, in seconds."""
    if n_frames < 0:
        raise ValueError(f"n_frames must be >= 0, got {n_frames}")
    return n_frames * SAMPLES_PER_FRAME / SAMPLE_RATE


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


def without_repeated_frames(frames: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """``frames`` (7 codes each) less every frame whose coarsest code repeats the last kept frame's, as
    Orpheus's training data was prepared: held sounds and silence become shorter runs of frames."""
    kept: list[tuple[int, ...]] = []
    for frame in frames:
        if not kept or frame[0] != kept[-1][0]:
            kept.append(tuple(frame))
    return kept


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

