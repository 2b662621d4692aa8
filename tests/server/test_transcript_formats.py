"""Transcripts written out as OpenAI's verbose_json, SubRip and WebVTT."""

from __future__ import annotations

import pytest

from lyre.server.routes.transcript_formats import language_name, srt, timestamp, verbose_json, vtt
from lyre.stt import Segment, Transcript, Word


def _segment(id: int, start: float, end: float, text: str, words: tuple[Word, ...] = ()) -> Segment:
    return Segment(id=id, start=start, end=end, text=text, tokens=(50364, 2555), temperature=0.0,
                   avg_logprob=-0.3, compression_ratio=1.1, no_speech_prob=0.01, words=words)


SEGMENTS = (
    _segment(1, 0.0, 1.5, " Hello there.", (Word(0.0, 0.6, " Hello", 0.9), Word(0.6, 1.5, " there.", 0.8))),
    _segment(2, 3661.5, 3663.004, " An hour\nlater.  "),
)


@pytest.mark.parametrize(("seconds", "decimal", "expected"), [
    (0.0, ",", "00:00:00,000"),
    (1.5, ",", "00:00:01,500"),
    (1.5, ".", "00:00:01.500"),
    (59.9996, ".", "00:01:00.000"),  # rounding carries into the minutes
    (3661.5, ",", "01:01:01,500"),
    (36_000.25, ".", "10:00:00.250"),
    (-0.2, ",", "00:00:00,000"),
])
def test_timestamps(seconds: float, decimal: str, expected: str) -> None:
    assert timestamp(seconds, decimal) == expected


def test_srt_numbers_cues_from_one_with_comma_milliseconds() -> None:
    assert srt(SEGMENTS) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello there.\n\n"
        "2\n01:01:01,500 --> 01:01:03,004\nAn hour later.\n\n"
    )


def test_vtt_has_its_header_and_point_milliseconds() -> None:
    assert vtt(SEGMENTS) == (
        "WEBVTT\n\n"
        "00:00:00.000 --> 00:00:01.500\nHello there.\n\n"
        "01:01:01.500 --> 01:01:03.004\nAn hour later.\n\n"
    )


def test_no_segments_and_empty_segments_make_no_cues() -> None:
    assert srt(()) == ""
    assert vtt(()) == "WEBVTT\n\n"
    blank = (_segment(1, 0.0, 1.0, "  "), _segment(2, 1.0, 2.0, " Yes."))
    assert srt(blank) == "1\n00:00:01,000 --> 00:00:02,000\nYes.\n\n"  # numbered among the cues kept
    assert vtt(blank) == "WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nYes.\n\n"


def test_verbose_json_is_openai_shaped() -> None:
    transcript = Transcript(text="Hello there. An hour later.", language="en", duration=3663.5, segments=SEGMENTS)
    body = verbose_json(transcript, segments=True, words=True)
    assert body["task"] == "transcribe" and body["language"] == "english" and body["duration"] == 3663.5
    assert body["text"] == "Hello there. An hour later."
    first = body["segments"][0]
    assert set(first) == {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                          "compression_ratio", "no_speech_prob"}
    assert first["text"] == " Hello there." and first["tokens"] == [50364, 2555]
    assert body["segments"][1]["seek"] == 366150  # Whisper's 10 ms frames
    assert body["words"] == [{"word": "Hello", "start": 0.0, "end": 0.6}, {"word": "there.", "start": 0.6, "end": 1.5}]


def test_verbose_json_gives_only_the_granularities_asked_for() -> None:
    transcript = Transcript(text="Hello there.", language="de", duration=1.5, segments=SEGMENTS[:1])
    assert "words" not in verbose_json(transcript)
    words_only = verbose_json(transcript, segments=False, words=True)
    assert "segments" not in words_only and len(words_only["words"]) == 2
    assert words_only["language"] == "german"


def test_language_names() -> None:
    assert language_name("en") == "english"
    assert language_name("yue") == "cantonese"
    assert language_name("xx") == "xx"  # passed through rather than lost
