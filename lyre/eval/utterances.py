"""What the gate asks a server to say, and asking it: the same prompts and seeds on every run.

Prompt k of a voice is text k of the prompt set with seed ``s + k`` for each base seed ``s`` (as ``lyre
bench`` seeds request k), so two runs, or two servers, are asked for exactly the same utterances and their
results pair up one to one. Each is one ``POST /v1/audio/speech`` for the whole utterance (``pcm``: 24 kHz
s16le, or ``wav``), with ``priority: batch``: the gate judges what is said, not when, so a busy server makes
it with spare capacity rather than refusing it. A 429 or 503 (a full queue, a server warming up) is tried
again after the pause it asks for; any other failure stops the run with the server's own message.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from lyre.eval.clips import Clip, from_pcm
from lyre.eval.replies import message, unreachable
from lyre.stt.audio import decode_file

__all__ = ["FORMATS", "SPEECH_PATH", "Prompt", "SpeechSettings", "prompts", "speak_all"]

SPEECH_PATH = "/v1/audio/speech"
FORMATS = ("pcm", "wav")
_PCM_RATE = 24_000  # the speech API's pcm: 24 kHz s16le mono
_RETRY_S = 1.0  # when a refusal names no Retry-After
_RETRY_FOR_S = 120.0  # a server still refusing after this long has failed the utterance


@dataclass(frozen=True)
class Prompt:
    index: int  # in the prompt set
    text: str
    voice: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.voice}-{self.index:04d}-s{self.seed}"


def prompts(texts: Sequence[str], voices: Sequence[str], seeds: Sequence[int]) -> list[Prompt]:
    """Every text in every voice once per base seed, text k with seed ``s + k``."""
    return [Prompt(k, text, voice, seed + k) for voice in voices for seed in seeds for k, text in enumerate(texts)]


@dataclass(frozen=True)
class SpeechSettings:
    response_format: str = "pcm"
    max_tokens: int | None = None  # None: the server's default
    concurrency: int = 4

    def __post_init__(self) -> None:
        if self.response_format not in FORMATS:
            raise ValueError(f"--response-format must be one of {', '.join(FORMATS)}, got {self.response_format!r}")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise ValueError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {self.concurrency}")


async def _speak(client: httpx.AsyncClient, url: str, prompt: Prompt, settings: SpeechSettings,
                 headers: dict[str, str]) -> Clip:
    body: dict[str, Any] = {"model": "orpheus", "input": prompt.text, "voice": prompt.voice,
                            "response_format": settings.response_format, "seed": prompt.seed, "priority": "batch"}
    if settings.max_tokens is not None:
        body["max_tokens"] = settings.max_tokens
    give_up = time.monotonic() + _RETRY_FOR_S
    while True:
        try:
            response = await client.post(url + SPEECH_PATH, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise unreachable(url, exc) from None
        if response.status_code not in (429, 503) or time.monotonic() > give_up:
            break
        await asyncio.sleep(float(response.headers.get("retry-after") or _RETRY_S))
    if response.status_code != 200:
        raise ValueError(f"{url}: {prompt.name} ({prompt.text[:60]!r}): the server answered {response.status_code}: "
                         f"{message(response)}")
    if settings.response_format == "pcm":
        return from_pcm(prompt.name, response.content, _PCM_RATE)
    return Clip(prompt.name, response.content, decode_file(response.content, f"{prompt.name}.wav"))


async def speak_all(client: httpx.AsyncClient, url: str, asked: Sequence[Prompt], settings: SpeechSettings,
                    headers: dict[str, str]) -> list[Clip]:
    """Each prompt spoken by the server at ``url``, ``settings.concurrency`` at a time, in the prompts' order."""
    gate = asyncio.Semaphore(settings.concurrency)

    async def one(prompt: Prompt) -> Clip:
        async with gate:
            return await _speak(client, url, prompt, settings, headers)

    tasks = [asyncio.create_task(one(prompt)) for prompt in asked]
    try:
        return list(await asyncio.gather(*tasks))
    finally:  # one utterance failed the run: the others are not left speaking
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
