"""Segment budgets on the demo model, whose random weights rarely say end-of-speech, so a segment runs to its
budget and the audio's length shows it: long text gets the room its words need, short text no more than the rule
allows, and every segment that ran out is reported."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from lyre.engine import FinishReason
from lyre.models.demo import DemoPaths
from lyre.orpheus import FRAME_SECONDS, FRAME_TOKENS, TOKENS_PER_SECOND
from lyre.tts import TTS, ServingConfig, SpeechOptions
from lyre.tts.budget import LEADING_S, SLOWEST_CHARS_PER_S, TAG_S, chars_within, speech_seconds, speech_tokens
from lyre.tts.segments import split_segments

# Natural speech runs at 13-16 characters a second: the audio must hold at least this much for its text.
NATURAL_CHARS_PER_S = 14

# With 1,024 positions a request (768 after the prompt's room), a segment holds at most 75 characters: these
# need two requests each, run side by side with one that fits one (the test costs one stream's ~1,400 steps).
MAX_SEQ_LEN = 1024
SENTENCE = ("When you arrive at the station, take the north exit past the flower stall and cross the avenue at the "
            "second set of lights.")
TEXT = "The door code is on the card we sent you. If it does not work, ring the bell twice and wait for us."
SHORT = "Your package left our warehouse this morning, before noon."


@pytest.fixture(scope="module")
def tts(demo: DemoPaths) -> Iterator[TTS]:
    tts = TTS.load(demo.model, demo.codec, ServingConfig(max_streams=4, max_seq_len=MAX_SEQ_LEN))
    yield tts
    tts.close()


def test_the_rule_budgets_the_slowest_delivery_plus_a_lead_in_and_tags() -> None:
    assert speech_seconds("a" * 90) == pytest.approx(LEADING_S + 90 / SLOWEST_CHARS_PER_S)
    assert speech_seconds("<laugh> " + "a" * 90) == pytest.approx(LEADING_S + 91 / SLOWEST_CHARS_PER_S + TAG_S)
    tokens = speech_tokens("a" * 90, room=10_000)
    assert tokens % FRAME_TOKENS == 0 and 0 <= tokens / TOKENS_PER_SECOND - speech_seconds("a" * 90) < FRAME_SECONDS
    assert speech_tokens("a" * 900, room=700) == 700  # never past the positions left
    assert speech_seconds("a" * chars_within(1792)) <= 1792 / TOKENS_PER_SECOND
    assert speech_seconds("a" * (chars_within(1792) + 1)) > 1792 / TOKENS_PER_SECOND


async def _speak(tts: TTS, text: str, options: SpeechOptions | None = None) -> tuple[float, Any]:
    stream = tts.stream(text, "tara", options or SpeechOptions(seed=3), streamed=False)
    samples = sum([len(chunk) async for chunk in stream])
    return samples / 24_000, stream


@pytest.fixture(scope="module")
def spoken(tts: TTS) -> dict[str, tuple[float, Any]]:
    """Each text's audio seconds and stream, the three spoken at once."""
    async def main() -> list[tuple[float, Any]]:
        return await asyncio.gather(*(_speak(tts, text) for text in (SENTENCE, TEXT, SHORT)))

    return dict(zip(("sentence", "text", "short"), asyncio.run(main())))


@pytest.mark.parametrize("name", ["sentence", "text"])
def test_text_too_long_for_one_request_gets_the_audio_its_words_need(tts: TTS, spoken: dict[str, Any],
                                                                      name: str) -> None:
    text = {"sentence": SENTENCE, "text": TEXT}[name]
    seconds, stream = spoken[name]
    segments = split_segments(text, stream.intake.segment_chars)
    assert stream.intake.segment_chars == chars_within(tts.max_tokens_limit) < len(text)
    assert len(segments) >= 2 and " ".join(segments) == text  # split at a clause or a sentence, nothing dropped
    budgets = [tokens for _, tokens in stream.budgets.segments]
    assert budgets == [speech_tokens(s, 10_000) for s in segments]  # each what its words need: none hit the room
    assert sum(budgets) / TOKENS_PER_SECOND >= len(text) / NATURAL_CHARS_PER_S
    # Segments that ran to their budget gave all of it (the trimmed lead-in is the only audio not sent), and
    # each was reported.
    cut = [i for i, reason in enumerate(stream.finish_reasons) if reason is FinishReason.LENGTH]
    assert [c.segment for c in stream.cuts] == cut and all(c.reason == "budget" for c in stream.cuts)
    assert seconds + stream.trimmed_ms / 1000 == pytest.approx(stream.frames * FRAME_SECONDS)
    if len(cut) == len(segments):  # the demo's usual case: every segment ran to its budget
        assert seconds >= len(text) / NATURAL_CHARS_PER_S
    assert seconds <= sum(speech_seconds(s) for s in segments) + FRAME_SECONDS * len(segments)


def test_a_short_sentence_gets_no_more_than_its_budget(spoken: dict[str, Any]) -> None:
    seconds, stream = spoken["short"]
    assert stream.segments == 1
    assert seconds <= speech_seconds(SHORT) + FRAME_SECONDS
    assert seconds <= len(SHORT) / 5 + 3


def test_a_client_max_tokens_caps_each_segment_and_the_cut_is_reported(tts: TTS, caplog: pytest.LogCaptureFixture,
                                                                       ) -> None:
    before = tts.segments_cut()
    with caplog.at_level(logging.WARNING, logger="lyre.tts"):
        seconds, stream = asyncio.run(_speak(tts, SENTENCE + " " + TEXT, SpeechOptions(seed=3, max_tokens=70)))
    assert stream.segments >= 3 and all(tokens == 70 for _, tokens in stream.budgets.segments)
    assert seconds <= stream.segments * 70 / TOKENS_PER_SECOND
    assert stream.cuts and all(c.reason == "max_tokens" and c.max_tokens == 70 for c in stream.cuts)
    after = tts.segments_cut()
    assert after["max_tokens"] - before["max_tokens"] == len(stream.cuts)
    assert any(stream.request_id in r.getMessage() and "max_tokens" in r.getMessage() for r in caplog.records)
