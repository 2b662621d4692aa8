"""``POST /v1/audio/speech``: the OpenAI speech API, streamed as the audio is made."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from typing import Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from lyre.common.tempo import MAX_SPEED, MIN_SPEED, TimeStretch
from lyre.server.aligner import word_timestamps
from lyre.server.body_limit import ServerLimitRoute
from lyre.server.encoding import FORMATS, make_encoder
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.speech_admission import admit_speech
from lyre.server.state import ServerState
from lyre.server.stream_encoder import StreamEncoder
from lyre.server.watched_response import WatchedStreamingResponse
from lyre.server.routes.voices_api import inline_reference
from lyre.stt import AlignedWord, WordTimer
from lyre.tts import AdapterBusy, AdapterError, SpeechOptions, TextOptions
from lyre.tts.reference_voices import MAX_SECONDS, MIN_SECONDS
from lyre.tts.voices import LanguageMismatch, Voices

__all__ = ["SpeechRequest", "router"]

ResponseFormat = Literal["pcm", "wav", "mp3", "opus", "flac", "aac", "mulaw", "alaw"]
assert set(ResponseFormat.__args__) == set(FORMATS)  # type: ignore[attr-defined]
_HEADER_SAFE = "".join(chr(c) for c in range(32, 127) if chr(c) != "%")  # printable ASCII stays as it is
_SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed")


router = APIRouter(route_class=ServerLimitRoute)  # the body refused before more than the limit is read


class SpeechRequest(BaseModel):
    """OpenAI's speech request, plus lyre's sampling extras."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field("orpheus", max_length=200)
    input: str = Field(..., min_length=1, description="Text to speak; Orpheus emotive tags such as <laugh> are kept")
    voice: str | None = Field(None, min_length=1, max_length=100,
                              description="A voice of the model, or an OpenAI voice name; default: the model's first")
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, ge=MIN_SPEED, le=MAX_SPEED, description="How fast the speech plays, its pitch kept "
                         "(a time stretch of the audio as made; word timestamps follow it)")
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: str | None = Field(None, max_length=4096)
    temperature: float | None = Field(None, ge=0, le=2.0)
    top_p: float | None = Field(None, gt=0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=100_000)
    repetition_penalty: float | None = Field(None, gt=0, le=10.0)
    max_tokens: int | None = Field(None, ge=1, le=100_000, description="lyre's extra: the most tokens each segment "
                                   "(a sentence or a few; 7 tokens are 85 ms of audio) may generate. Unset, each "
                                   "segment gets what its words need at 9 characters a second, plus 1 s")
    seed: int | None = Field(None, ge=0, lt=2**63)
    trim_silence: bool = True
    timestamps: bool = Field(False, description="lyre's extra: word times. With stream_format sse, "
                             "speech.word_timestamps events among the audio deltas; otherwise one JSON answer "
                             "with the whole audio base64-encoded and its words")
    reference_audio: str | None = Field(
        None, description=f"lyre's extra: a voice for this request alone, from a clip ({MIN_SECONDS:g}-{MAX_SECONDS:g} "
                          "s of one person speaking, any format ffmpeg reads, base64; within the server's body "
                          "limit). It speaks instead of voice; a clip sent again is not made again")
    reference_text: str | None = Field(None, max_length=2000, description="What reference_audio says; default: the "
                                       "server's Whisper transcribes it")
    normalize: bool = Field(True, description="lyre's extra: read numbers, amounts, dates, times, units, "
                            "abbreviations, acronyms, web addresses and symbols as words before speaking (false: "
                            "the text as written; the server's --no-normalize turns it off for all)")
    language: str | None = Field(None, max_length=35, description="lyre's extra: the text's language (a tag such "
                                 "as 'en' or 'en-US'), choosing how it is read; default English. A language "
                                 "without rules in lyre is spoken as written. A voice of the model known to speak "
                                 "another language is a 400 naming both")
    ssml: bool = Field(False, description="lyre's extra: input is SSML (also when it starts with <speak>): "
                       "<break>, <say-as>, <sub>, <p>, <s>; anything else is read as its text, named in the "
                       "X-Lyre-SSML-Warnings header. Malformed SSML is a 400 naming the problem")
    priority: Literal["realtime", "batch"] = Field(
        "realtime", description="realtime: played as it streams, scheduled on the listener's playback deadline; "
                                "batch: a file nobody plays live, made with spare capacity. Said explicitly, "
                                "realtime also marks the request live: refused at once (429) when the server's "
                                "measured rates cannot take one more stream, rather than queued")

    @property
    def live(self) -> bool:
        """Marked live by the client (``"priority": "realtime"`` given): refused at once when the rates cannot
        take it, so a router can place it elsewhere. Unmarked (what the OpenAI SDK sends), it waits its turn."""
        return "priority" in self.model_fields_set and self.priority == "realtime"

    def options(self) -> SpeechOptions:
        return SpeechOptions(**{name: getattr(self, name) for name in _SAMPLING_FIELDS})

    def reading(self) -> TextOptions:
        """How the input is read (InvalidParam naming a malformed language)."""
        try:
            return TextOptions.of(self.input, self.normalize, self.language, self.ssml)
        except ValueError as exc:
            raise InvalidParam(str(exc), "language") from None


def _check_voice_language(voices: Voices, voice: str | None, body: SpeechRequest) -> list[str]:
    """A 400 when the model's ``voice`` speaks another language than ``body.language`` names; else what of the
    input's emotive tags the model was not trained on in the voice's language (warnings: as other tags lyre
    cannot use, they are left out or read as written, and the speech goes on)."""
    try:
        voices.check_language(voice, body.language)
    except LanguageMismatch as exc:
        raise InvalidParam(f"voice and language disagree: {exc}", exc.param) from None
    return voices.tag_warnings(voice, body.input)


def _sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


_AUDIO_TYPES = {"audio/pcm": {}, "audio/wav": {}, "audio/mpeg": {}, "audio/ogg": {}, "audio/flac": {},
                "audio/aac": {}, "audio/basic": {}, "audio/x-alaw-basic": {}, "text/event-stream": {},
                "application/json": {}}


@router.post(
    "/v1/audio/speech",
    response_class=StreamingResponse,
    responses={200: {"description": "Audio, streamed as it is made", "content": _AUDIO_TYPES},
               404: error_doc("Text to speech is not served by this server"),
               413: error_doc("The request body is over the server's limit"),
               429: error_doc("A request marked live (\"priority\": \"realtime\") the server's measured rates "
                              "cannot take now; the queue of requests waiting for a stream is full, or one "
                              "waited past its timeout (30 s by default); every adapter slot holds a cloned voice "
                              "in use, or too many requests' own reference clips are being made into voices"),
               503: error_doc("The server is shutting down, or a cloned voice's folder cannot be loaded")},
)
async def create_speech(body: SpeechRequest, request: Request) -> Response:
    state: ServerState = request.app.state.lyre
    tts = state.require_tts()
    if state.draining:
        raise HTTPException(503, "server is shutting down")
    if body.instructions:
        raise InvalidParam("instructions: not supported by Orpheus; put emotive tags such as <laugh> in the input",
                           "instructions")
    voice, reading = body.voice or tts.voices.default, body.reading()  # a malformed language first
    tag_warnings = _check_voice_language(tts.voices, voice if body.reference_audio is None else None, body)
    received = time.perf_counter()
    reference = (await inline_reference(state, tts, body.reference_audio, body.reference_text)
                 if body.reference_audio is not None else None)
    stream = tts.stream(body.input, voice, body.options(), trim=body.trim_silence,
                        streamed=body.priority == "realtime", reference=reference,
                        reading=reading)  # validates before any work
    encoder = make_encoder(body.response_format)
    exits = AsyncExitStack()
    try:
        wait = await admit_speech(state, tts, stream, request, body.live, exits)
    except BaseException:
        await stream.aclose()
        await exits.aclose()
        raise
    if wait is None:  # the client left while it waited
        await stream.aclose()
        return Response(status_code=499)
    state.metrics.queue_wait.observe(wait)
    try:  # a cloned voice is made resident now (loading it on a miss), so a refusal is still a status code
        await stream.hold_voice()
    except BaseException as exc:
        await stream.aclose()
        await exits.aclose()
        if isinstance(exc, AdapterBusy):
            raise HTTPException(429, str(exc), headers={"Retry-After": "1"}) from None
        if isinstance(exc, AdapterError):
            raise HTTPException(503, f"voice {body.voice!r} cannot be loaded: {exc}") from None
        raise
    api = "sse" if body.stream_format == "sse" else "json" if body.timestamps else "http"
    timer = state.word_timer(("speech", id(stream)), body.language) if body.timestamps else None
    if timer is not None:  # a word too long for one segment is found in it, and timed as one word
        timer.expect(body.input)
    media = {"sse": "text/event-stream", "json": "application/json"}.get(api, encoder.content_type)
    headers = {"X-Lyre-SSML-Warnings": "; ".join(stream.warnings)[:2000]} if stream.warnings else {}
    if tag_warnings:
        # A header is Latin-1: the tags and voices of other scripts travel percent-encoded (UTF-8).
        headers["X-Lyre-Tag-Warnings"] = quote("; ".join(tag_warnings)[:2000], safe=_HEADER_SAFE)
    return WatchedStreamingResponse(_body(state, stream, encoder, api, received, exits, timer,
                                          TimeStretch(body.speed)), media_type=media, headers=headers,
                                    write_timeout_s=state.config.write_timeout_s,
                                    on_stall=lambda: state.metrics.stalled.labels(api).inc())


async def _body(state: ServerState, stream: Any, encoder: StreamEncoder, api: str, received: float,
                exits: AsyncExitStack, timer: WordTimer | None, stretch: TimeStretch) -> AsyncIterator[bytes]:
    """Encode chunks as they come, played at ``stretch``'s speed (the "json" answer: all at the end); on
    disconnect the task is cancelled and everything is freed. Words are placed in the audio as made, and
    their times told as it plays."""
    metrics = state.metrics
    outcome = "cancelled"
    encoded: list[bytes] = []  # the "json" answer's audio
    words: list[AlignedWord] = []
    told = 0  # the stream's cut segments told the client so far (sse)
    heard = 0  # the listener's underruns counted so far (a stream someone plays as it comes)
    try:
        async for chunk in stream:
            if stream.samples == len(chunk):  # the first audio of this request
                metrics.ttfa.labels(api).observe(time.perf_counter() - received)
            if stream.streamed:
                heard = metrics.count_underruns(api, stream.clock.gaps, heard)
            if data := encoder.feed(stretch.push(chunk)):
                if api == "sse":
                    yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
                elif api == "json":
                    encoded.append(data)
                else:
                    yield data
            if api == "sse":  # a segment cut on its budget (words may be missing): said as soon as it is known
                for event in _cut_events(stream, told):
                    yield event
                told = len(stream.cuts)
            if timer is not None:  # after the audio: word times never hold it back
                timer.add(chunk)
                timer.follow(stream.spoken, _cut(stream))
                for event in _word_events(timer.ready(), api, words, stretch):
                    yield event
        tail = encoder.feed(stretch.flush()) + encoder.finish()
        if timer is not None:
            timer.follow(stream.spoken, _cut(stream))
        if api == "sse":
            if tail:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(tail).decode()})
            for event in _cut_events(stream, told):
                yield event
            if timer is not None:
                for event in _word_events(await timer.rest(), api, words, stretch):
                    yield event
            prompt_tokens = stream.prompt_tokens
            output_tokens = 7 * stream.frames
            usage = {"input_tokens": prompt_tokens, "output_tokens": output_tokens,
                     "total_tokens": prompt_tokens + output_tokens}
            done: dict[str, object] = {"type": "speech.audio.done", "usage": usage}
            if timer is not None:
                done["spoken_text"] = _spoken_text(stream)
            yield _sse(done)
        elif api == "json":
            if timer is not None:
                words.extend(_played(w, stretch) for found in await timer.rest() for w in found)
            audio = base64.b64encode(encoder.whole(b"".join(encoded) + tail)).decode()
            yield json.dumps({"audio": audio, "content_type": encoder.content_type,
                              "duration": round(stretch.seconds_out, 3),
                              "words": [{"text": w.text, "start": w.start, "end": w.end} for w in words],
                              "cut_segments": [cut.event() for cut in stream.cuts],
                              "spoken_text": _spoken_text(stream), "warnings": stream.warnings}).encode()
        elif tail:
            yield tail
        outcome = "ok"
        metrics.audio.labels(api).inc(stream.audio_seconds)
        metrics.trimmed.observe(stream.trimmed_ms / 1000)
    except Exception:
        outcome = "error"
        metrics.errors.labels("stream").inc()
        raise
    finally:
        metrics.requests.labels(api, outcome).inc()
        if timer is not None:
            timer.close()
            metrics.count_word_times(api, timer)
        await stream.aclose()
        await exits.aclose()


def _cut_events(stream: Any, told: int) -> Iterator[bytes]:
    """An SSE event for each of the stream's cut segments after the first ``told``."""
    for cut in stream.cuts[told:]:
        yield _sse({"type": "speech.segment_cut", **cut.event()})


def _cut(stream: Any) -> set[int]:
    """The indices of the stream's segments cut on their budgets (their words not spoken are not timed)."""
    return {cut.segment for cut in stream.cuts}


def _spoken_text(stream: Any) -> str:
    """What the model was given to say, segment by segment (the written text where it is said as written)."""
    return " ".join(s.said.spoken if s.said is not None else s.text for s in stream.segments_so_far())


def _played(word: AlignedWord, stretch: TimeStretch) -> AlignedWord:
    """A word's times in the audio as played (at the stretch's speed), from its times as made."""
    return AlignedWord(word.text, stretch.seconds(word.start), stretch.seconds(word.end))


def _word_events(aligned: list[list[AlignedWord]], api: str, words: list[AlignedWord],
                 stretch: TimeStretch) -> Iterator[bytes]:
    """Each segment's words, as played: an SSE event each, and all of them kept in ``words``."""
    for found in aligned:
        found = [_played(w, stretch) for w in found]
        words.extend(found)
        if found and api == "sse":
            yield _sse({"type": "speech.word_timestamps", "word_timestamps": word_timestamps(found)})
