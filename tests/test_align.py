"""Forced alignment: word times against utterances whose boundaries are known to the sample, and
`POST /v1/audio/alignments` on a real server."""

from __future__ import annotations

import asyncio
import io
import wave
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from align_truth import ALIGN_SENTENCES, KnownUtterance, known_utterance
from lyre.stt import Alignment, Transcriber, TranscriberBusy, WordTimer, written_words
from lyre.stt.align import snap_to_voice
from serving import Server, running_server

# Measured over ALIGN_SENTENCES (benchmarks/align.py prints the figures): word boundaries within these
# of the truth, with room for another CPU's int8 kernels.
MEDIAN_TOLERANCE_S = 0.06
P95_TOLERANCE_S = 0.15


def test_words_come_back_as_written_with_punctuation_attached_and_no_tags() -> None:
    assert written_words("Hello, world!") == ["Hello,", "world!"]
    assert written_words("Dr. Smith <laugh> paid $40 - twice.") == ["Dr.", "Smith", "paid", "$40 -", "twice."]
    assert written_words('" Quoted" start') == ['" Quoted"', "start"]
    assert written_words("<sigh> ... <laugh>") == []


def test_spans_shrink_to_the_voice_inside_them_and_never_overlap() -> None:
    rate = 16_000
    audio = np.zeros(rate, np.float32)
    audio[int(0.2 * rate):int(0.4 * rate)] = 0.5 * np.sin(np.arange(int(0.2 * rate)) * 0.3)
    audio[int(0.6 * rate):int(0.8 * rate)] = 0.5 * np.sin(np.arange(int(0.2 * rate)) * 0.3)
    # The raw alignment's habits: the first word from 0, a boundary off the pause, a pause given to a word.
    spans = snap_to_voice(audio, np.array([0.0, 0.45, 0.9]), np.array([0.45, 0.9, 0.95]))
    assert spans[0] == pytest.approx((0.2, 0.4), abs=0.011)
    assert spans[1] == pytest.approx((0.6, 0.8), abs=0.011)
    assert spans[2] == pytest.approx((0.9, 0.9), abs=1e-9)  # no voice left for it: no time, in its place
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


@pytest.fixture(scope="module")
def stt() -> Iterator[Transcriber]:
    transcriber = Transcriber.load()
    yield transcriber
    transcriber.close()


@pytest.fixture(scope="module")
def utterances() -> list[KnownUtterance]:
    return [known_utterance(text, seed=i) for i, text in enumerate(ALIGN_SENTENCES)]


def _align_all(stt: Transcriber, utterances: list[KnownUtterance]) -> list[Alignment]:
    async def run() -> list[Alignment]:
        return list(await asyncio.gather(*(stt.align(u.audio, written_words(u.text), "en", session=i)
                                           for i, u in enumerate(utterances))))
    return asyncio.run(run())


def _errors(utterance: KnownUtterance, found: Alignment) -> list[float]:
    errors = []
    for (text, start, end), word in zip(utterance.words, found.words):
        assert word.text == text
        errors += [abs(word.start - start), abs(word.end - end)]
    return errors


def test_word_boundaries_are_within_the_measured_tolerance(stt: Transcriber,
                                                           utterances: list[KnownUtterance]) -> None:
    found = _align_all(stt, utterances)
    errors = []
    for utterance, alignment in zip(utterances, found):
        assert [w.text for w in alignment.words] == written_words(utterance.text)  # numbers and the tag too
        times = [t for w in alignment.words for t in (w.start, w.end)]
        assert times == sorted(times) and 0 <= times[0] and times[-1] <= alignment.duration
        errors += _errors(utterance, alignment)
    assert len(errors) >= 100  # at least 50 words
    median, p95 = np.median(errors), np.percentile(errors, 95)
    print(f"boundary error over {len(errors) // 2} words: median {1000 * median:.0f} ms, p95 {1000 * p95:.0f} ms")
    assert median <= MEDIAN_TOLERANCE_S and p95 <= P95_TOLERANCE_S, (median, p95)
    assert stt.stats().alignments == len(utterances)


def test_an_alignment_batched_with_others_matches_it_alone(stt: Transcriber,
                                                          utterances: list[KnownUtterance]) -> None:
    alone = _align_all(stt, utterances[:1])[0]
    together = _align_all(stt, utterances[:3])[0]
    assert [w.text for w in together.words] == [w.text for w in alone.words]
    # The batch pads every encoder input to the longest: a word may move by an attention frame or two.
    assert max(abs(a.start - b.start) + abs(a.end - b.end) for a, b in zip(alone.words, together.words)) <= 0.1


def test_a_streams_segments_are_timed_in_order_from_the_streams_start(stt: Transcriber,
                                                                    utterances: list[KnownUtterance]) -> None:
    """`WordTimer`: three utterances back to back as one stream, each aligned once it has ended (the second
    while the third is still streaming); the aligner refuses the second, which gets no words alone."""
    pieces = [(u, (np.clip(u.audio, -1, 1) * 32767).astype(np.int16)) for u in utterances[:3]]
    calls = 0

    async def aligner() -> Transcriber:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise TranscriberBusy("the queue is full")
        return stt

    async def run() -> tuple[list[list], WordTimer]:
        timer = WordTimer(aligner, "stream", rate=16_000)
        got: list[list] = []
        collect = asyncio.create_task(_collect(timer, got))
        at = 0
        for utterance, pcm in pieces:
            for i in range(0, pcm.size, 1600):  # 100 ms chunks
                timer.add(pcm[i:i + 1600])
            timer.segment(utterance.text, at, at + pcm.size)
            at += pcm.size
        timer.finish()
        await collect
        return got, timer

    async def _collect(timer: WordTimer, got: list[list]) -> None:
        async for words in timer.results():
            got.append(words)

    got, timer = asyncio.run(run())
    assert len(got) == 3 and got[1] == [] and timer.failures == 1
    offset, errors = 0.0, []
    for (utterance, pcm), words in zip(pieces, got):
        if words:
            assert [w.text for w in words] == written_words(utterance.text)
            errors += [abs(w.start - (start + offset)) for (_, start, _), w in zip(utterance.words, words)]
        offset += pcm.size / 16_000
    assert np.median(errors) <= MEDIAN_TOLERANCE_S, errors


# -- the API ---------------------------------------------------------------------------------------------


def _wav_bytes(audio: np.ndarray) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16_000)
        w.writeframes((np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--no-tts", "--stt-max-file-mb", "1") as s:
        yield s


def test_the_api_answers_words_as_written_with_their_times(server: Server,
                                                          utterances: list[KnownUtterance]) -> None:
    utterance = utterances[3]  # an abbreviation, numbers and a tag
    reply = httpx.post(f"{server.url}/v1/audio/alignments", data={"text": utterance.text},
                       files={"file": ("said.wav", _wav_bytes(utterance.audio), "audio/wav")}, timeout=120)
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["duration"] == pytest.approx(utterance.audio.size / 16_000, abs=0.01)
    assert [w["text"] for w in body["words"]] == [text for text, _, _ in utterance.words]
    for word, (_, start, end) in zip(body["words"], utterance.words):
        assert abs(word["start"] - start) <= 0.3 and abs(word["end"] - end) <= 0.3
    assert server.metric("lyre_stt_alignments_total") >= 1


@pytest.mark.parametrize(("fields", "file", "status", "message"), [
    ({"text": ""}, ("a.wav", "ok"), 400, "text"),
    ({"text": "<laugh> ..."}, ("a.wav", "ok"), 400, "text: no words"),
    ({"text": " ".join(["word"] * 40)}, ("a.wav", "ok"), 400, "40 words cannot all be spoken"),
    ({"text": "Hello there."}, ("a.wav", b"not audio at all"), 400, "file:"),
    ({"text": "Hello there."}, ("a.wav", b"\0" * (2 * 2**20)), 413, "upload is over"),
    ({"text": "Hello there.", "language": "xx"}, ("a.wav", "ok"), 400, "language"),
    ({}, ("a.wav", "ok"), 400, "text: Field required"),
])
def test_bad_input_is_a_4xx_naming_the_field(server: Server, fields: dict[str, str], file: tuple[str, object],
                                             status: int, message: str) -> None:
    name, data = file
    content = _wav_bytes(np.zeros(16_000, np.float32)) if data == "ok" else data
    reply = httpx.post(f"{server.url}/v1/audio/alignments", data=fields, files={"file": (name, content)},
                       timeout=60)
    assert reply.status_code == status, reply.text
    assert message in reply.text, reply.text


def test_audio_over_thirty_seconds_is_refused_naming_the_file(server: Server) -> None:
    long = _wav_bytes(np.zeros(31 * 16_000, np.float32))
    reply = httpx.post(f"{server.url}/v1/audio/alignments", data={"text": "Hello."},
                       files={"file": ("long.wav", long)}, timeout=60)
    assert reply.status_code == 400 and "file: at most 30 s" in reply.text, reply.text


def test_an_aligner_of_its_own_loads_once_on_first_use_and_a_bad_one_is_named(tmp_path) -> None:
    """``--aligner``: a named Whisper folder, loaded on the first request that needs it and then kept; a folder
    that is no Whisper fails that request with its reason (the next may try again); ``off`` is off."""
    from lyre.server.aligner import ALIGNER_OFF, Aligner, AlignerUnavailable
    from lyre.stt import demo_whisper

    async def run() -> None:
        named = Aligner(str(demo_whisper()), None, "cpu")
        assert named.separate and named.loaded is None  # nothing loaded before it is asked for
        first, again = await asyncio.gather(named.get(), named.get())
        assert first is again is named.loaded
        await named.aclose()
        broken = Aligner(str(tmp_path), None, "cpu")
        with pytest.raises(AlignerUnavailable, match="could not be loaded"):
            await broken.get()
        with pytest.raises(AlignerUnavailable, match="--aligner off"):
            await Aligner(ALIGNER_OFF, None, "cpu").get()

    asyncio.run(run())
