"""Speaking one request and timing every byte of it: over HTTP (pooled or not) or a WebSocket.

A *channel* runs one request at a time: the pooled HTTP client shared by all
channels, a fresh HTTP client per request, or one WebSocket (one context per
request). Each request comes back as a `Result`: the chunk timeline measured
at the client, the end-to-end time, and an error kind when it failed. Errors
are data here, never exceptions: a load test must keep going and count them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import re
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from lyre.bench.metrics import Chunk
from lyre.bench.playback import first_audible
from lyre.orpheus import SAMPLE_RATE

__all__ = ["RETRY_AFTER_MAX_S", "SPEECH_PATH", "WEBSOCKET_PATH", "Channel", "Job", "Result", "Transport",
           "make_transport", "retry_after"]

SPEECH_PATH = "/v1/audio/speech"
WEBSOCKET_PATH = "/v1/tts/websocket"
_BYTES_PER_SECOND = 2 * SAMPLE_RATE  # s16le mono
# Reads closer together than this after a chunk's first read are one chunk: the
# server sent them as one piece and the network split it (a 64 KiB window
# arrives as several reads). Wider than loopback jitter, far under a frame (85 ms).
COALESCE_S = 0.002
_DETAIL_CHARS = 200  # of an error body or message, kept in the record
_KIND_CHARS = 80  # of a WebSocket error message, as its error kind
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_WS_MAX_MESSAGE = 16 * 2**20  # a wide window on a fast GPU is far larger than websockets' 1 MiB default
_KEEPALIVE = 1024  # pooled connections kept open: more than any sweep's streams
RETRY_AFTER_MAX_S = 30.0  # a closed-loop stream refused waits its Retry-After, at most this, before its next request
_OUTPUT_FORMAT = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": SAMPLE_RATE}


@dataclass(frozen=True)
class Job:
    """What one request asks for."""

    text: str
    voice: str
    max_tokens: int
    seed: int | None


@dataclass
class Result:
    """One request as measured: ``chunks`` are (s since sent, audio s); ``error`` is None when complete."""

    e2e_s: float = 0.0
    chunks: list[Chunk] = field(default_factory=list)
    error: str | None = None  # "http_429", "timeout", "connection", "protocol", "ws: <message>", ...
    detail: str | None = None
    ttfb_s: float | None = None  # the response's first byte: HTTP headers, or the socket's first message for it
    leading_silence_s: float | None = None  # audio before the first audible sample (None: none came)
    retry_after_s: float | None = None  # a refusal's Retry-After: when the server asked to be tried again


class _Timeline:
    """Audio arrivals of one request, coalesced into chunks; the leading silence found as the audio comes."""

    def __init__(self, sent: float, result: Result) -> None:
        self.sent = sent
        self.chunks: list[Chunk] = []
        self._result = result
        self._samples = 0  # s16 samples seen so far
        self._odd = b""  # a sample split between two reads

    def add(self, data: bytes) -> None:
        if not data:
            return
        t = time.perf_counter() - self.sent
        seconds = len(data) / _BYTES_PER_SECOND
        if self.chunks and t - self.chunks[-1][0] <= COALESCE_S:
            start, held = self.chunks[-1]
            self.chunks[-1] = (start, held + seconds)
        else:
            self.chunks.append((t, seconds))
        if self._result.leading_silence_s is None:  # scanned only until the first audible sample
            data, self._odd = self._odd + data, b""
            if len(data) % 2:
                data, self._odd = data[:-1], data[-1:]
            if (found := first_audible(data)) is not None:
                self._result.leading_silence_s = (self._samples + found) / SAMPLE_RATE
            self._samples += len(data) // 2


class Channel(ABC):
    """Runs one request at a time; `speak` never raises for a failed request."""

    @abstractmethod
    async def speak(self, job: Job) -> Result: ...

    async def aclose(self) -> None:
        """Release what the channel holds open."""


def _failure(result: Result, sent: float, exc: BaseException) -> Result:
    """Fill in a failed request's error kind from the exception that ended it."""
    if isinstance(exc, (TimeoutError, httpx.TimeoutException)):
        result.error = "timeout"
    elif isinstance(exc, InvalidStatus):
        result.error = f"http_{exc.response.status_code}"
    elif isinstance(exc, (httpx.TransportError, ConnectionClosed, InvalidHandshake, OSError)):
        result.error = "connection"
    elif isinstance(exc, ValueError):  # a reply that is not the protocol's JSON or base64
        result.error = "protocol"
    else:
        result.error = f"client: {type(exc).__name__}"
    result.detail = str(exc)[:_DETAIL_CHARS] or type(exc).__name__
    result.e2e_s = time.perf_counter() - sent
    return result


class _HttpChannel(Channel):
    """``POST /v1/audio/speech`` for raw PCM; ``client`` None opens a new client per request."""

    def __init__(self, url: str, client: httpx.AsyncClient | None, headers: dict[str, str],
                 timeout_s: float) -> None:
        self._url = url + SPEECH_PATH
        self._client = client
        self._headers = headers
        self._timeout_s = timeout_s

    async def speak(self, job: Job) -> Result:
        # Marked live: the bench plays each stream as it comes, so a server that cannot keep it real time says
        # so at once (429) rather than queueing it as it would a file.
        body: dict[str, Any] = {"model": "orpheus", "input": job.text, "voice": job.voice, "priority": "realtime",
                                "response_format": "pcm", "stream_format": "audio", "max_tokens": job.max_tokens}
        if job.seed is not None:
            body["seed"] = job.seed
        result = Result()
        sent = time.perf_counter()  # a new client's connect is inside the timing: that is what pooling saves
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._client is not None:
                    await self._post(self._client, body, sent, result)
                else:
                    async with httpx.AsyncClient(timeout=self._timeout_s) as client:
                        await self._post(client, body, sent, result)
        except Exception as exc:  # noqa: BLE001 - every failure is a counted outcome, not a crash
            return _failure(result, sent, exc)
        result.e2e_s = time.perf_counter() - sent
        return result

    async def _post(self, client: httpx.AsyncClient, body: dict[str, Any], sent: float, result: Result) -> None:
        timeline = _Timeline(sent, result)
        result.chunks = timeline.chunks
        async with client.stream("POST", self._url, json=body, headers=self._headers) as response:
            result.ttfb_s = time.perf_counter() - sent
            if response.status_code != 200:
                result.error = f"http_{response.status_code}"
                result.detail = (await response.aread()).decode(errors="replace")[:_DETAIL_CHARS]
                result.retry_after_s = retry_after(response.headers.get("retry-after"), response.status_code)
                return
            # Raw reads: pcm has no content encoding, and decoding would only add buffering.
            async for piece in response.aiter_raw():
                timeline.add(piece)


def retry_after(header: str | None, status: int) -> float | None:
    """Seconds a refusal (429, 503) asks to wait: its Retry-After in seconds, else 1; None if not a refusal."""
    if status not in (429, 503):
        return None
    seconds = header.strip() if header else ""
    return min(RETRY_AFTER_MAX_S, float(seconds)) if seconds.isdigit() else 1.0


def _ws_error_kind(message: str) -> str:
    """The kind of a WebSocket error message: its text with names and numbers masked, so that
    the same error on different requests ("request 'tts-58/0' needs 514 positions") counts as one kind."""
    masked = _NUMBER.sub("N", _QUOTED.sub("'…'", message))
    return f"ws: {masked[:_KIND_CHARS]}"


class _WsChannel(Channel):
    """One WebSocket, opened on first use (inside that request's timing) and reused; a context per request."""

    def __init__(self, url: str, headers: dict[str, str], timeout_s: float) -> None:
        self._url = url + WEBSOCKET_PATH
        self._headers = headers
        self._timeout_s = timeout_s
        self._socket: ClientConnection | None = None
        self._ids = itertools.count()

    async def speak(self, job: Job) -> Result:
        context_id = f"bench-{next(self._ids)}"
        message: dict[str, Any] = {"context_id": context_id, "model_id": "orpheus",
                                   "voice": {"mode": "id", "id": job.voice}, "output_format": _OUTPUT_FORMAT,
                                   "transcript": job.text, "continue": False, "max_tokens": job.max_tokens}
        if job.seed is not None:
            message["seed"] = job.seed
        result = Result()
        sent = time.perf_counter()
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._socket is None:
                    self._socket = await connect(self._url, additional_headers=self._headers,
                                                 max_size=_WS_MAX_MESSAGE)
                await self._socket.send(json.dumps(message))
                await self._receive(self._socket, context_id, _Timeline(sent, result), result)
        except Exception as exc:  # noqa: BLE001 - every failure is a counted outcome, not a crash
            # The socket's state is unknown (a context may still be speaking): start afresh next time.
            await self.aclose()
            return _failure(result, sent, exc)
        result.e2e_s = time.perf_counter() - sent
        return result

    @staticmethod
    async def _receive(socket: ClientConnection, context_id: str, timeline: _Timeline, result: Result) -> None:
        result.chunks = timeline.chunks
        async for raw in socket:
            reply = json.loads(raw)
            if reply.get("context_id") not in (context_id, None):
                continue  # a late message for an earlier context
            kind = reply.get("type")
            if result.ttfb_s is None:
                result.ttfb_s = time.perf_counter() - timeline.sent
            if kind == "chunk":
                try:
                    timeline.add(base64.b64decode(reply.get("data", ""), validate=True))
                except (binascii.Error, TypeError) as exc:
                    raise ValueError(f"undecodable audio chunk: {exc}") from None
            elif kind == "error":
                error = str(reply.get("error", ""))
                result.error = _ws_error_kind(error)
                result.detail = error[:_DETAIL_CHARS]
                return
            if kind == "done" or reply.get("done") is True:
                return
        raise ConnectionError("the server closed the socket mid-request")

    async def aclose(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.close()


class Transport(ABC):
    """Makes channels to one server and owns what they share."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        self.url = url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s

    @abstractmethod
    def channel(self) -> Channel: ...

    async def aclose(self) -> None:
        """Close what every channel shared."""


class _HttpTransport(Transport):
    def __init__(self, url: str, api_key: str | None, timeout_s: float, pooled: bool) -> None:
        super().__init__(url, api_key, timeout_s)
        # No connection cap: a capped pool would queue requests inside the client and
        # count that wait as the server's TTFA.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=_KEEPALIVE)
        self._client = httpx.AsyncClient(timeout=timeout_s, limits=limits) if pooled else None

    def channel(self) -> Channel:
        return _HttpChannel(self.url, self._client, self.headers, self.timeout_s)

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


class _WsTransport(Transport):
    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        super().__init__(url, api_key, timeout_s)
        self._ws_url = "ws" + self.url.removeprefix("http")  # http -> ws, https -> wss

    def channel(self) -> Channel:
        return _WsChannel(self._ws_url, self.headers, self.timeout_s)


def make_transport(url: str, api: str, *, api_key: str | None, timeout_s: float, pooled: bool) -> Transport:
    """The transport for ``api`` ("http" or "ws") to the server at ``url`` (http:// or https://)."""
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"server URL must start with http:// or https://, got {url!r}")
    if api == "http":
        return _HttpTransport(url, api_key, timeout_s, pooled)
    if api == "ws":
        return _WsTransport(url, api_key, timeout_s)
    raise ValueError(f"api must be 'http' or 'ws', got {api!r}")
