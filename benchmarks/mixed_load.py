"""Mixed load on a lyre server or fleet, for the chaos and soak benchmarks: HTTP speech requests, TTS
WebSocket contexts and realtime transcription sessions, each worker one request after another, every outcome
kept (when it started and ended, whether it succeeded, which server took it, or that nothing was listening).

    load = Load(lambda: "http://127.0.0.1:8080")
    task = asyncio.create_task(load.run(http=2, sockets=1, transcriptions=1))
    ...
    load.stop(); await task
    load.outcomes, load.summary()
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # espeak-ng speech, as the tests have it
from speech import SENTENCES, speak_pcm16, speak_wav  # noqa: E402

__all__ = ["Load", "Outcome"]

_TIMEOUT_S = 60.0
_SPEECH = {"input": "Hello there, how are you today?", "response_format": "pcm", "max_tokens": 56}
_VOICES = ("tara", "leah", "jess", "leo")
_CHUNK = 24_000 * 2 // 10  # 100 ms of pcm16 at 24 kHz


@dataclass
class Outcome:
    kind: str  # "http", "socket" or "transcription"
    start: float  # monotonic
    end: float
    ok: bool
    server: str | None  # the server that took it (x-lyre-server), when known
    refused: bool = False  # nothing was listening where it connected
    error: str = ""

    @property
    def busy(self) -> bool:
        """Refused for capacity (429, or the socket's own words for it): the server said to come back later."""
        return "429" in self.error or "at capacity" in self.error or "1013" in self.error


class Load:
    def __init__(self, base: Callable[[], str], admin_key: str | None = None) -> None:
        self._base = base  # where to send: asked afresh for every request (a router restarted elsewhere)
        self._admin = admin_key
        self._stopping = asyncio.Event()
        self._speech = speak_pcm16(SENTENCES[3])
        self.outcomes: list[Outcome] = []

    def stop(self) -> None:
        self._stopping.set()

    def summary(self) -> dict[str, dict[str, int]]:
        counts: dict[str, Counter[str]] = {}
        for o in self.outcomes:
            counts.setdefault(o.kind, Counter())["ok" if o.ok else "refused" if o.refused else "busy" if o.busy
                                                  else "failed"] += 1
        return {kind: dict(c) for kind, c in counts.items()}

    async def upload_voice(self, name: str) -> None:
        """A reference voice from an espeak-ng clip, through ``base`` with the admin key."""
        files = {"file": ("clip.wav", speak_wav(SENTENCES[1]), "audio/wav")}
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.post(self._base() + "/v1/audio/voices", data={"name": name, "text": SENTENCES[1]},
                                       files=files, headers={"Authorization": f"Bearer {self._admin}"})
        answer.raise_for_status()

    async def run(self, http: int = 2, sockets: int = 1, transcriptions: int = 1) -> None:
        workers = ([self._worker("http", i, self._http) for i in range(http)]
                   + [self._worker("socket", i, self._socket) for i in range(sockets)]
                   + [self._worker("transcription", i, self._transcription) for i in range(transcriptions)])
        await asyncio.gather(*workers)

    async def _worker(self, kind: str, i: int, once: Callable[[str, Outcome], object]) -> None:
        n = 0
        while not self._stopping.is_set():
            n += 1
            start = time.monotonic()
            outcome = Outcome(kind, start, start, False, None)
            try:
                async with asyncio.timeout(_TIMEOUT_S):
                    await once(f"{kind}-{i}-{n}", outcome)  # type: ignore[misc]
                outcome.ok = True
            except (httpx.ConnectError, ConnectionRefusedError) as exc:
                outcome.refused, outcome.error = True, repr(exc)
            except Exception as exc:  # whatever broke it is the figure: kept, and the worker goes on
                outcome.error = repr(exc)[:300]
                outcome.refused = isinstance(exc, OSError) and "Connect call failed" in str(exc)
            outcome.end = time.monotonic()
            self.outcomes.append(outcome)
            if outcome.refused:
                await asyncio.sleep(0.2)  # a client retrying a connection, not spinning on it

    async def _http(self, session: str, outcome: Outcome) -> None:
        body = {**_SPEECH, "voice": _VOICES[hash(session) % len(_VOICES)]}
        async with httpx.AsyncClient(timeout=_TIMEOUT_S) as client:
            async with client.stream("POST", self._base() + "/v1/audio/speech", json=body,
                                     headers={"x-lyre-session": session}) as answer:
                outcome.server = answer.headers.get("x-lyre-server")
                audio = b"".join([chunk async for chunk in answer.aiter_bytes()])
                if answer.status_code != 200 or not audio:
                    raise RuntimeError(f"HTTP {answer.status_code}: {audio[:200]!r}")

    async def _socket(self, session: str, outcome: Outcome) -> None:
        url = self._base().replace("http", "ws", 1) + f"/v1/tts/websocket?session={session}"
        message = {"context_id": "c", "voice": {"mode": "id", "id": "tara"}, "transcript": "Hello there.",
                   "continue": False, "max_tokens": 56,
                   "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}}
        async with connect(url, open_timeout=10) as ws:
            outcome.server = ws.response.headers.get("x-lyre-server") if ws.response else None
            await ws.send(json.dumps(message))
            audio = 0
            while (reply := json.loads(await ws.recv()))["type"] in ("chunk", "segment_cut"):
                audio += len(reply.get("data", ""))
            if reply["type"] != "done" or not audio:
                raise RuntimeError(f"context ended with {reply}")

    async def _transcription(self, session: str, outcome: Outcome) -> None:
        url = self._base().replace("http", "ws", 1) + f"/v1/realtime?intent=transcription&session={session}"
        async with connect(url, open_timeout=10) as ws:
            outcome.server = ws.response.headers.get("x-lyre-server") if ws.response else None
            await ws.send(json.dumps({"type": "transcription_session.update", "session": {"turn_detection": None}}))
            for i in range(0, len(self._speech), _CHUNK):
                audio = base64.b64encode(self._speech[i:i + _CHUNK]).decode()
                await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            await ws.send(json.dumps({"type": "input_audio_buffer.commit"}))
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "conversation.item.input_audio_transcription.completed":
                    return
                if event["type"] in ("error", "conversation.item.input_audio_transcription.failed"):
                    raise RuntimeError(f"transcription: {event}")
