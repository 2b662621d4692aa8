"""``POST /v1/audio/speech``: the OpenAI speech API, streamed as the audio is made."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Literal

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from lyre.engine import SamplingParams
from lyre.server.encoding import FORMATS, StreamEncoder, make_encoder
from lyre.server.errors import error_doc
from lyre.server.state import ServerState
from lyre.tts import SpeechStream

__all__ = ["SpeechRequest", "router"]

router = APIRouter()

# KV-cache positions kept for a segment's prompt (a 300-character segment is well under 200 tokens).
PROMPT_ROOM = 256

ResponseFormat = Literal["pcm", "wav", "mp3", "opus", "flac", "aac", "mulaw", "alaw"]
assert set(ResponseFormat.__args__) == set(FORMATS)  # type: ignore[attr-defined]


class SpeechRequest(BaseModel):
    """OpenAI's speech request, plus lyre's sampling extras."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field("orpheus", max_length=200)
    input: str = Field(..., min_length=1, description="Text to speak; Orpheus emotive tags such as <laugh> are kept")
    voice: str = Field("tara", min_length=1, max_length=100)
    response_format: ResponseFormat = "mp3"
    speed: float = Field(1.0, gt=0, le=4.0, description="Only 1.0: Orpheus cannot change its speaking rate")
    stream_format: Literal["audio", "sse"] = "audio"
    instructions: str | None = Field(None, max_length=4096)
    temperature: float | None = Field(None, ge=0, le=2.0)
    top_p: float | None = Field(None, gt=0, le=1.0)
    top_k: int | None = Field(None, ge=0, le=100_000)
    repetition_penalty: float | None = Field(None, gt=0, le=10.0)
    max_tokens: int | None = Field(None, ge=1, le=100_000)
    seed: int | None = Field(None, ge=0, lt=2**63)
    trim_silence: bool = True

    def sampling(self, max_tokens_limit: int) -> SamplingParams:
        """The request's sampling; an unset max_tokens is the default, capped at the server's limit."""
        given = {
            name: value
            for name in ("temperature", "top_p", "top_k", "repetition_penalty", "max_tokens", "seed")
            if (value := getattr(self, name)) is not None
        }
        given.setdefault("max_tokens", min(SamplingParams.max_tokens, max_tokens_limit))
        return SamplingParams(**given)


def _sse(event: dict[str, object]) -> bytes:
    return f"data: {json.dumps(event)}\n\n".encode()


_AUDIO_TYPES = {"audio/pcm": {}, "audio/wav": {}, "audio/mpeg": {}, "audio/ogg": {}, "audio/flac": {},
                "audio/aac": {}, "audio/basic": {}, "audio/x-alaw-basic": {}, "text/event-stream": {}}


@router.post(
    "/v1/audio/speech",
    response_class=StreamingResponse,
    responses={200: {"description": "Audio, streamed as it is made", "content": _AUDIO_TYPES},
               404: error_doc("Text to speech is not served by this server"),
               503: error_doc("The server is shutting down")},
)
async def create_speech(body: SpeechRequest, request: Request) -> StreamingResponse:
    state: ServerState = request.app.state.lyre
    tts = state.require_tts()
    if state.draining:
        raise HTTPException(503, "server is shutting down")
    if body.speed != 1.0:
        raise ValueError(f"speed: {body.speed} is not supported; Orpheus speaks at its own rate (use 1.0)")
    if body.instructions:
        raise ValueError("instructions: not supported by Orpheus; put emotive tags such as <laugh> in the input")
    received = time.perf_counter()
    limit = state.config.max_seq_len - PROMPT_ROOM
    if body.max_tokens is not None and body.max_tokens > limit:
        raise ValueError(f"max_tokens: {body.max_tokens} is over this server's limit of {limit}")
    sampling = body.sampling(limit)
    stream = tts.stream(body.input, body.voice, sampling, trim=body.trim_silence)  # validates first
    encoder = make_encoder(body.response_format)
    exits = AsyncExitStack()
    try:
        # The active/queued gauges are read from the admission at scrape time.
        wait = await exits.enter_async_context(state.admission.slot())
    except BaseException:
        await stream.aclose()
        raise
    state.metrics.queue_wait.observe(wait)
    api = "sse" if body.stream_format == "sse" else "http"
    media = "text/event-stream" if api == "sse" else encoder.content_type
    return StreamingResponse(_body(state, stream, encoder, api, received, exits), media_type=media)


async def _body(state: ServerState, stream: SpeechStream, encoder: StreamEncoder, api: str, received: float,
                exits: AsyncExitStack) -> AsyncIterator[bytes]:
    """Encode chunks as they come; on disconnect the task is cancelled and everything is freed."""
    metrics = state.metrics
    outcome = "cancelled"
    try:
        async for chunk in stream:
            if stream.samples == len(chunk):  # the first audio of this request
                metrics.ttfa.labels(api).observe(time.perf_counter() - received)
            data = encoder.feed(chunk)
            if data:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}) if api == "sse" else data
        tail = encoder.finish()
        if api == "sse":
            if tail:
                yield _sse({"type": "speech.audio.delta", "audio": base64.b64encode(tail).decode()})
            prompt_tokens = stream.prompt_tokens
            output_tokens = 7 * stream.frames
            usage = {"input_tokens": prompt_tokens, "output_tokens": output_tokens,
                     "total_tokens": prompt_tokens + output_tokens}
            yield _sse({"type": "speech.audio.done", "usage": usage})
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
        await stream.aclose()
        await exits.aclose()
