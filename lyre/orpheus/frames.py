"""Audio tokens and SNAC frames: a token for code ``c`` at frame position ``k`` is ``AUDIO_TOKEN_BASE +
CODEBOOK_SIZE * k + c``; seven make a frame, and a frame's codes feed SNAC's three levels."""

from collections.abc import Sequence

from lyre.orpheus.ids import AUDIO_TOKEN_BASE, CODEBOOK_SIZE, FRAME_TOKENS, SAMPLE_RATE, SAMPLES_PER_FRAME

__all__ = ["FrameAssembler", "InvalidAudioToken", "audio_seconds", "audio_token", "codes_to_snac_levels",
           "frame_codes", "frames_to_snac_codes", "parse_audio_token", "position_range", "snac_codes_to_frames",
           "without_repeated_frames"]

# One past the last audio token (position 6, code 4095).
_AUDIO_TOKEN_END = AUDIO_TOKEN_BASE + FRAME_TOKENS * CODEBOOK_SIZE

# Frame positions feeding each SNAC level, in order. Level 0 is coarsest (one
# code per frame); each finer level doubles the temporal resolution, and a
# frame lists its codes depth-first: 0, 1a, 2a, 2b, 1b, 2c, 2d.
_LEVEL_POSITIONS = ((0,), (1, 4), (2, 3, 5, 6))


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


def without_repeated_frames(frames: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """``frames`` (7 codes each) less every frame whose coarsest code repeats the last kept frame's, as
    Orpheus's training data was prepared: held sounds and silence become shorter runs of frames."""
    kept: list[tuple[int, ...]] = []
    for frame in frames:
        if not kept or frame[0] != kept[-1][0]:
            kept.append(tuple(frame))
    return kept
