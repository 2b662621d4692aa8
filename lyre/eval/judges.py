"""Who hears the audio: a server's own speech to text, or a Whisper model loaded here.

- `ServerStt`: ``POST /v1/audio/transcriptions`` on a server that runs with ``--stt``; a server without it
  is refused when the judge is opened, with what to do instead.
- `LocalWhisper`: a CTranslate2 Whisper folder or hub id loaded with faster-whisper exactly as ``lyre serve
  --stt`` loads one (`lyre.stt.Transcriber`), ``demo`` being the built-in Whisper base.

Either way each clip gets one final pass (beam search, the temperature fallback) in the language named.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import httpx

from lyre.eval.clips import Clip
from lyre.eval.replies import message, unreachable

__all__ = ["BUILTIN_WHISPER", "TRANSCRIPTIONS_PATH", "Judge", "LocalWhisper", "ServerStt"]

TRANSCRIPTIONS_PATH = "/v1/audio/transcriptions"
BUILTIN_WHISPER = "demo"  # --whisper demo: the Whisper base lyre's speech to text loads when none is named
_STT_MODEL = "whisper-1"  # what a lyre server with --stt lists in /v1/models


class Judge(ABC):
    """Transcribes clips; ``name`` says who, for the report."""

    name: str

    @abstractmethod
    async def transcribe(self, clip: Clip) -> str: ...

    async def aclose(self) -> None:
        """Release what the judge holds."""


class ServerStt(Judge):
    """A server's own ``POST /v1/audio/transcriptions``; open it with `ServerStt.open`."""

    def __init__(self, client: httpx.AsyncClient, url: str, language: str, headers: dict[str, str]) -> None:
        self._client = client
        self._url = url
        self._language = language
        self._headers = headers
        self.name = f"the speech to text of {url} ({_STT_MODEL})"

    @classmethod
    async def open(cls, client: httpx.AsyncClient, url: str, language: str, headers: dict[str, str]) -> ServerStt:
        """The judge at ``url``; a ValueError saying so when the server has no speech to text."""
        try:
            response = await client.get(url + "/v1/models", headers=headers)
        except httpx.HTTPError as exc:
            raise unreachable(url, exc) from None
        served = {m.get("id") for m in response.json().get("data", [])} if response.status_code == 200 else set()
        if _STT_MODEL not in served:
            raise ValueError(f"the server at {url} has no speech to text (its /v1/models lists no {_STT_MODEL}): "
                             f"start it with --stt, or give --whisper MODEL to transcribe here "
                             f"(--whisper {BUILTIN_WHISPER}: the built-in Whisper base)")
        return cls(client, url, language, headers)

    async def transcribe(self, clip: Clip) -> str:
        files = {"file": (f"{clip.name}.wav", clip.data, "audio/wav")}
        form = {"model": _STT_MODEL, "language": self._language, "response_format": "json"}
        try:
            response = await self._client.post(self._url + TRANSCRIPTIONS_PATH, files=files, data=form,
                                               headers=self._headers)
        except httpx.HTTPError as exc:
            raise unreachable(self._url, exc) from None
        if response.status_code != 200:
            raise ValueError(f"{self._url}: transcribing {clip.name}: the server answered {response.status_code}: "
                             f"{message(response)}")
        return str(response.json()["text"])


class LocalWhisper(Judge):
    """A Whisper model loaded in this process, as ``lyre serve --stt`` loads it."""

    def __init__(self, model: str, language: str, device: str = "cpu") -> None:
        from lyre.stt import STTConfig, TranscribeOptions, Transcriber

        self._stt = Transcriber.load(None if model == BUILTIN_WHISPER else model, STTConfig(device=device))
        self._stt.check_language(language)
        self._options = TranscribeOptions(language=language)
        self.name = ("the built-in Whisper base" if model == BUILTIN_WHISPER else f"Whisper {model}") + ", local"

    async def transcribe(self, clip: Clip) -> str:
        transcript = await self._stt.transcribe(clip.audio, self._options, session="eval")
        return transcript.text

    async def aclose(self) -> None:
        self._stt.close()
