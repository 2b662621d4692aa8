"""``POST /v1/audio/transcriptions``: OpenAI's transcription API, a whole file in, its transcript out."""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Literal

from fastapi import APIRouter, File, Form, Request, Response, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from lyre.server.routes import transcript_formats as formats
from lyre.server.admission import Overloaded
from lyre.server.body_limit import LimitedBodyRoute
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.state import ServerState
from lyre.stt import (
    MAX_PROMPT_CHARS,
    AudioError,
    AudioTooLong,
    TranscribeOptions,
    TranscriberBusy,
    TranscriberClosed,
    TranscriptionFailed,
    Transcript,
    decode_file,
)

__all__ = ["TRANSCRIPTIONS_PATH", "LimitedUpload", "as_http_error", "router", "upload_body_limit", "upload_limit"]

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
# Room in a multipart body beyond the file: part headers, boundaries and the other fields
# (a prompt is at most 1000 characters).
_FORM_ROOM = 64 * 1024
_RETRY_AFTER_S = 1  # a full transcriber queue drains in seconds

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["word", "segment"]
assert ResponseFormat.__args__ == formats.RESPONSE_FORMATS  # type: ignore[attr-defined]


def upload_limit(request: Request) -> tuple[int, str]:
    """The largest audio file this server takes, and the error naming it."""
    limit = request.app.state.lyre.config.stt_max_file_bytes
    return limit, f"file: the upload is over this server's limit of {limit / 2**20:g} MB ({limit} bytes)"


def upload_body_limit(request: Request) -> tuple[int, str]:
    """The most bytes a form carrying one upload may take: the file's limit, and room for the other fields."""
    limit, too_large = upload_limit(request)
    return limit + _FORM_ROOM, too_large


def _stt_on_and_not_draining(request: Request) -> None:
    """Speech to text off, or a draining server, is answered before the upload is read."""
    state: ServerState = request.app.state.lyre
    state.require_stt()
    if state.draining:
        raise HTTPException(503, "server is shutting down")


class LimitedUpload(LimitedBodyRoute):
    """Refuses an upload over the limit before its body is read: by its Content-Length, or, for
    a chunked body, as soon as the bytes received pass the limit. So no more of a body than the
    limit reaches memory or the disk the form parser spools files to."""

    body_limit = staticmethod(upload_body_limit)
    before_body = staticmethod(_stt_on_and_not_draining)


class TranscriptionJson(BaseModel):
    text: str


class TranscriptionSegment(BaseModel):
    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionWord(BaseModel):
    word: str
    start: float
    end: float


class TranscriptionVerbose(BaseModel):
    task: Literal["transcribe"]
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegment] | None = None  # with the "segment" granularity (the default)
    words: list[TranscriptionWord] | None = None  # with the "word" granularity


router = APIRouter(route_class=LimitedUpload)


@router.post(
    TRANSCRIPTIONS_PATH,
    response_model=TranscriptionJson | TranscriptionVerbose,
    responses={
        200: {"description": "The transcript: JSON for json and verbose_json, plain text for text, srt and vtt",
              "content": {"text/plain": {"schema": {"type": "string"}}}},
        404: error_doc("Speech to text is not enabled on this server"),
        413: error_doc("The file is over the server's upload limit"),
        503: error_doc("The server is shutting down"),
    },
)
async def create_transcription(
    request: Request,
    file: Annotated[UploadFile, File(description="Audio in any format ffmpeg reads: wav, mp3, flac, ogg, "
                                                 "webm, m4a, ...")],
    model: Annotated[str, Form(max_length=200, description="Any name, such as whisper-1: the server runs "
                                                           "one Whisper model")],
    language: Annotated[str | None, Form(max_length=20, description="ISO-639-1 code, such as en; "
                                                                    "detected when not given")] = None,
    prompt: Annotated[str | None, Form(max_length=MAX_PROMPT_CHARS)] = None,
    temperature: Annotated[float, Form(ge=0, le=1)] = 0.0,
    response_format: Annotated[ResponseFormat, Form()] = "json",
    timestamp_granularities: Annotated[list[Granularity] | None, Form(alias="timestamp_granularities[]")] = None,
) -> Response:
    received = time.perf_counter()
    state: ServerState = request.app.state.lyre
    stt = state.require_stt()
    outcome = "error"
    try:
        if timestamp_granularities and response_format != "verbose_json":
            raise InvalidParam("timestamp_granularities[] needs response_format verbose_json, "
                               f"got {response_format}", "timestamp_granularities[]")
        limit, too_large = upload_limit(request)
        if file.size is not None and file.size > limit:
            raise HTTPException(413, too_large)
        granularities = set(timestamp_granularities or ("segment",))
        options = TranscribeOptions(language=(language or "").strip().lower() or None, prompt=prompt or None,
                                    temperature=temperature, word_timestamps="word" in granularities)
        try:
            stt.check_language(options.language)  # before the decode, which can take a while
        except ValueError as exc:
            raise InvalidParam(str(exc), "language") from None
        name = file.filename or "file"
        most = state.config.stt_max_file_seconds
        try:
            audio = await asyncio.to_thread(decode_file, await file.read(), name, most)
        except AudioTooLong as exc:
            raise InvalidParam(f"file: {exc}; this server transcribes at most {most:g} s of audio a file "
                               "(--stt-max-file-seconds)", "file") from None
        # One queue per client address: a client sending many files delays others by one job at most.
        client = request.client.host if request.client else None
        transcript = await stt.transcribe(audio, options, session=("rest", client))
        response = _respond(transcript, response_format, granularities)
        state.metrics.transcription_latency.observe(time.perf_counter() - received)
        outcome = "ok"
        return response
    except (AudioError, TranscriberBusy, TranscriberClosed, TranscriptionFailed) as exc:
        raise as_http_error(exc) from exc
    finally:
        state.metrics.transcriptions.labels(response_format, outcome).inc()


def as_http_error(exc: Exception) -> Exception:
    """What a client gets for the speech-to-text worker's refusal or failure, or for audio it cannot read."""
    if isinstance(exc, AudioError):
        return InvalidParam(f"file: {exc}", "file")
    if isinstance(exc, TranscriberBusy):
        return Overloaded(str(exc), _RETRY_AFTER_S)
    if isinstance(exc, TranscriberClosed):
        return HTTPException(503, "server is shutting down")
    return HTTPException(500, str(exc))


def _respond(transcript: Transcript, response_format: ResponseFormat, granularities: set[str]) -> Response:
    if response_format == "json":
        return JSONResponse({"text": transcript.text})
    if response_format == "verbose_json":
        return JSONResponse(formats.verbose_json(transcript, segments="segment" in granularities,
                                                 words="word" in granularities))
    if response_format == "srt":
        return PlainTextResponse(formats.srt(transcript.segments))
    if response_format == "vtt":
        return PlainTextResponse(formats.vtt(transcript.segments))
    return PlainTextResponse(transcript.text)
