"""Reading a stream's text: SSML into segments and pauses, streamed text never cut inside a unit."""

from __future__ import annotations

import asyncio
import time

import pytest

from lyre.text.said import Pause, Said
from lyre.text.ssml import parse_ssml
from lyre.tts import TextFront, TextOptions
from lyre.tts.intake import TextIntake
from lyre.tts.reading import split_said, ssml_items
from lyre.tts.segments import IncrementalSplitter, split_segments


def test_ssml_becomes_read_blocks_and_pauses() -> None:
    items, warnings = ssml_items('<speak><p>It is $5.</p><break strength="strong"/>'
                                 '<say-as interpret-as="digits">123</say-as> <emphasis>ok</emphasis></speak>',
                                 TextFront(), TextOptions(ssml=True), max_chars=300)
    assert items == [Said((("It", "It"), ("is", "is"), ("$5.", "five dollars."))), Pause(750),
                     Said((("123", "one two three"), ("ok", "okay")))]
    assert warnings == ["<emphasis> is not supported; its text is read"]


def test_say_as_is_read_even_with_normalising_off_and_text_is_not() -> None:
    items, _ = ssml_items('<speak>$5 <say-as interpret-as="ordinal">3</say-as></speak>', TextFront(),
                          TextOptions(normalize=False, ssml=True), max_chars=300)
    assert [s.spoken for s in items] == ["$5 third"]


def test_a_say_as_that_cannot_be_read_is_read_as_text_with_a_warning() -> None:
    pieces, warnings = parse_ssml('<speak><say-as interpret-as="date">soon</say-as></speak>',
                                  TextFront.rules("en"))
    assert warnings and "cannot be read as date" in warnings[0]


def test_ssml_nested_past_its_depth_is_refused_and_numbers_too_long_to_count_are_read_digit_by_digit() -> None:
    from lyre.text.ssml import MAX_DEPTH, SSMLError

    nested = "<speak>" + "<s>" * MAX_DEPTH + "Hi." + "</s>" * MAX_DEPTH + "</speak>"
    with pytest.raises(SSMLError, match=f"nested {MAX_DEPTH + 1} deep; at most {MAX_DEPTH}"):
        parse_ssml(nested)
    parse_ssml(nested.replace("<s>", "", 1).replace("</s>", "", 1))  # at the limit: read
    items, _ = ssml_items('<speak><say-as interpret-as="ordinal">' + "1" + "0" * 399 + "</say-as></speak>",
                          TextFront(), TextOptions(ssml=True), max_chars=5000)
    spoken = " ".join(s.spoken for s in items)
    assert spoken.startswith("one zero zero") and spoken.endswith("zero zeroth") and len(spoken.split()) == 400
    assert TextFront().read("the 1" + "0" * 60 + "th time", "en").spoken.endswith("zero zeroth time")


def test_a_long_block_is_cut_at_sentence_ends_within_the_segment_size() -> None:
    said = TextFront().read("One two three. Four five six. Seven eight nine ten eleven.", "en")
    pieces = split_said(said, max_chars=30)
    assert [p.written for p in pieces] == ["One two three. Four five six.", "Seven eight nine ten eleven."]
    assert all(len(p.written) <= 30 for p in pieces)


@pytest.mark.parametrize("text", ["Walk 5 km today and then more and more and more.",
                                  "Meet at 10:30 am with Dr. Smith and the others."])
def test_a_cut_between_words_never_falls_inside_a_unit(text: str) -> None:
    for size in range(20, len(text)):
        segments = split_segments(text, size)
        for left, right in zip(segments, segments[1:]):
            assert not TextFront.joins(left.split()[-1], right.split()[0]), (size, segments)


def test_a_pause_in_streamed_text_holds_a_last_word_that_may_continue() -> None:
    splitter = IncrementalSplitter(max_chars=300)
    assert splitter.push("It costs $") == []
    assert splitter.settle() == ["It costs"] and splitter.held  # "$" may be the start of an amount
    assert splitter.push("3") == [] and splitter.settle() == [] and splitter.held
    assert splitter.push(".50 today") == []
    assert splitter.flush() == ["$3.50 today"]
    assert splitter.push("Walk 5 ") == [] and splitter.settle() == ["Walk"]  # "5" may be "5 km"
    assert splitter.push("km now") == [] and splitter.flush() == ["5 km now"]


def test_the_intake_waits_for_the_unit_then_speaks_it_whole() -> None:
    async def main() -> list[object]:
        intake = TextIntake(max_chars=1000, segment_chars=300, flush_after_s=0.05)
        intake.push("It costs $")
        first = await intake.next(idle_since=time.monotonic())
        intake.push("3")
        await asyncio.sleep(0.15)  # a pause: "$3" may go on
        assert intake.ready() is None
        intake.push(".50")
        intake.end()
        return [first, await intake.next(idle_since=time.monotonic())]

    assert asyncio.run(main()) == ["It costs", "$3.50"]


def test_a_held_unit_is_spoken_after_its_wait_if_nothing_more_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("lyre.tts.intake.UNIT_WAIT_S", 0.1)

    async def main() -> str | None:
        intake = TextIntake(max_chars=1000, segment_chars=300, flush_after_s=0.05, idle_timeout_s=5)
        intake.push("$3")
        return await asyncio.wait_for(intake.next(idle_since=time.monotonic()), 2)  # type: ignore[return-value]

    assert asyncio.run(main()) == "$3"


def test_a_reading_that_fails_mid_stream_is_spoken_as_written_and_counted(demo: object,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from lyre.tts import TTS, ServingConfig, SpeechOptions

    tts = TTS.load(demo.model, demo.codec, ServingConfig(max_streams=1, max_seq_len=512))  # type: ignore[attr-defined]

    def broken(words: list[str], fixed: object = None) -> list[str]:
        raise RuntimeError("a bug in a rule")

    async def main() -> tuple[int, list[object]]:
        stream = tts.stream("It costs $5.", "tara", SpeechOptions(seed=1, max_tokens=28))
        samples = sum([len(c) async for c in stream])
        return samples, stream.segments_so_far()

    try:
        monkeypatch.setattr(TextFront.rules("en"), "read_words", broken)
        samples, segments = asyncio.run(main())
    finally:
        tts.close()
    assert samples > 0 and tts.front.fallbacks == 1
    assert [(s.text, s.said) for s in segments] == [("It costs $5.", None)]  # said as written
