"""The speech-to-text worker: one Whisper model, one thread, a fair queue across sessions.

    stt = Transcriber.load()                      # the demo (Whisper base) when no model is named
    transcript = await stt.transcribe(audio, TranscribeOptions(language="en"), session="rest")
    text = await stt.partial(audio, language="en", session=session_id)

Two kinds of pass:

- a *final* pass is faster-whisper's full ``transcribe`` (beam search, the
  temperature fallback, timestamps, audio of any length): REST requests and
  the end of each realtime utterance;
- a *partial* pass is one greedy decode of an utterance so far (at most 30 s,
  no timestamps, temperature 0): the realtime deltas while someone speaks.
  Partials from several sessions can share one encoder and decoder batch.

Jobs wait in a `JobQueue` (lyre.stt.job_queue): each session's in order, the
sessions in turn, finals before partials.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lyre.common.batching import BatchLimits
from lyre.common.loops import settle_futures
from lyre.stt.align import Alignment, align_passes
from lyre.stt.audio import SAMPLE_RATE
from lyre.stt.job_queue import Job, JobQueue, TranscriberClosed
from lyre.stt.model import resolve_whisper
from lyre.stt.whisper import TranscribeOptions, Transcript, final_pass, partial_passes
from lyre.stt.window import FULL_WINDOW, FinalWindow

if TYPE_CHECKING:
    from lyre.stt.fitted import FittedWhisperModel

__all__ = [
    "MAX_ALIGN_SECONDS",
    "MAX_PARTIAL_SECONDS",
    "PartialPolicy",
    "STTConfig",
    "STTStats",
    "Transcriber",
    "TranscriptionFailed",
]

MAX_PARTIAL_SECONDS = 30.0  # Whisper's window: a partial pass sees one
MAX_ALIGN_SECONDS = 30.0  # and so does an alignment


class TranscriptionFailed(RuntimeError):
    """The model itself failed on a job (not the caller's input)."""


@dataclass(frozen=True)
class PartialPolicy(BatchLimits):
    """How partial passes are batched: up to ``max_batch`` sessions, gathered for ``max_wait_ms``."""

    @classmethod
    def for_device(cls, device: str) -> PartialPolicy:
        # On a GPU a batch of 8 costs about what one pass does, so partials wait a
        # few ms for company. Even on 2 CPU cores, 4 partials of fitted windows in
        # one batch took 0.85 s against 1.30 s one by one, with the same mean wait
        # (benchmarks/stt.py); live sessions ask again as soon as they are served,
        # so each gets a partial that much more often. Over 30 s windows it saved nothing.
        if device.startswith("cuda"):
            return cls(max_batch=8, max_wait_ms=10.0)
        return cls(max_batch=4, max_wait_ms=10.0)


@dataclass(frozen=True)
class STTConfig:
    """How the Whisper model runs. ``compute_type`` None: int8 on CPU, float16 on CUDA."""

    device: str = "cpu"
    compute_type: str | None = None
    cpu_threads: int = 0  # 0: every core
    max_pending: int = 64  # jobs queued at once; more raise TranscriberBusy
    partial_policy: PartialPolicy | None = None  # None: PartialPolicy.for_device(device)
    # The final pass's first window, per path (docs/benchmarks.md, "Speech to text: the final pass's window"):
    # on espeak speech the utterance and 2 s heard as well as 30 s for a quarter of the CPU, but a measurement
    # on other speech found it 2.4 points worse on files. Files, which nobody waits on, keep Whisper's 30 s; the
    # end of a live turn (TranscribeOptions.live) takes the fitted window, its completed transcript ~0.9 s sooner.
    file_window: FinalWindow = FULL_WINDOW
    live_window: FinalWindow = FinalWindow(pad_s=2.0)

    def __post_init__(self) -> None:
        if self.device != "cpu" and not self.device.startswith("cuda"):
            raise ValueError(f"device must be cpu or cuda[:N], got {self.device!r}")
        if self.cpu_threads < 0:
            raise ValueError(f"cpu_threads must be >= 0, got {self.cpu_threads}")
        if self.max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {self.max_pending}")


@dataclass(frozen=True)
class STTStats:
    pending: int
    finals: int
    partials: int
    partial_batches: int
    audio_seconds: float  # audio transcribed by final passes
    alignments: int
    aligned_seconds: float  # audio aligned with given text
    busy_seconds: float  # worker time spent in the model
    queue_wait_total_s: float
    queue_wait_max_s: float

    @property
    def mean_partial_batch(self) -> float:
        return self.partials / self.partial_batches if self.partial_batches else 0.0


class Transcriber:
    """One Whisper model behind a worker thread; see the module docstring."""

    def __init__(self, model: FittedWhisperModel, config: STTConfig) -> None:
        self.model = model
        self.config = config
        self.policy = config.partial_policy or PartialPolicy.for_device(config.device)
        self.languages = frozenset(model.supported_languages)
        self._queue = JobQueue(config.max_pending, self.policy)
        self._lock = threading.Lock()  # the worker's counts, read by stats()
        self._counts = {"finals": 0, "partials": 0, "partial_batches": 0, "alignments": 0}
        self._audio_s = self._aligned_s = self._busy_s = 0.0
        self._thread = threading.Thread(target=self._work, name="lyre-stt", daemon=True)
        self._thread.start()

    @classmethod
    def load(cls, model: str | os.PathLike[str] | None = None, config: STTConfig | None = None) -> Transcriber:
        from lyre.stt.fitted import FittedWhisperModel  # with CTranslate2: loaded only by servers that transcribe

        config = config or STTConfig()
        folder = resolve_whisper(model)
        device, _, index = config.device.partition(":")
        compute = config.compute_type or ("float16" if device == "cuda" else "int8")
        whisper = FittedWhisperModel(str(folder), device=device, device_index=int(index or 0),
                                     compute_type=compute, cpu_threads=config.cpu_threads)
        return cls(whisper, config)

    # -- the public surface, called on an event loop --

    def check_language(self, language: str | None) -> None:
        if language is not None and language not in self.languages:
            raise ValueError(f"language must be an ISO-639-1 code Whisper knows (such as en, de, fr), "
                             f"got {language!r}")

    async def transcribe(self, audio: np.ndarray, options: TranscribeOptions, session: Hashable) -> Transcript:
        """A final pass over ``audio`` (float32 at 16 kHz, any length)."""
        self.check_language(options.language)
        return await self._submit(Job(session, audio, *self._future(), options=options))

    async def partial(self, audio: np.ndarray, language: str | None, session: Hashable) -> str:
        """A greedy pass over an utterance so far (at most 30 s; longer keeps the last 30 s)."""
        self.check_language(language)
        audio = audio[-int(MAX_PARTIAL_SECONDS * SAMPLE_RATE):]
        return await self._submit(Job(session, audio, *self._future(), language=language))

    async def align(self, audio: np.ndarray, words: list[str], language: str | None, session: Hashable,
                    partial: bool = False) -> Alignment:
        """When each of ``words`` is spoken in ``audio`` (float32 at 16 kHz, at most 30 s); see lyre.stt.align.
        ``partial`` changes nothing: Whisper's alignment places every word, and where the audio stops before
        them the last are squeezed into its end, which `lyre.stt.word_timer` leaves out."""
        self.check_language(language)
        if audio.size > MAX_ALIGN_SECONDS * SAMPLE_RATE:
            raise ValueError(f"audio: at most {MAX_ALIGN_SECONDS:g} s can be aligned at once, "
                             f"got {audio.size / SAMPLE_RATE:.1f} s")
        return await self._submit(Job(session, audio, *self._future(), language=language or "en", words=words))

    def final_window(self, options: TranscribeOptions) -> FinalWindow:
        """The first window a final pass with ``options`` encodes: the live path's or the files'."""
        return self.config.live_window if options.live else self.config.file_window

    def stats(self) -> STTStats:
        with self._lock:
            return STTStats(audio_seconds=self._audio_s, aligned_seconds=self._aligned_s, busy_seconds=self._busy_s,
                            **self._queue.stats(), **self._counts)

    def close(self) -> None:
        """Stop the worker; queued jobs fail with TranscriberClosed."""
        jobs = self._queue.close()
        closed = TranscriberClosed("the speech-to-text worker is shut down")
        settle_futures((job.loop, job.future, closed) for job in jobs)
        self._thread.join(timeout=60)

    @staticmethod
    def _future() -> tuple[asyncio.Future, asyncio.AbstractEventLoop]:
        loop = asyncio.get_running_loop()
        return loop.create_future(), loop

    async def _submit(self, job: Job):
        self._queue.put(job)
        try:
            return await job.future
        except asyncio.CancelledError:  # the caller gave up: drop the job unless it has started
            self._queue.discard(job)
            raise

    # -- the worker thread --

    def _align(self, batch: list[Job]) -> list[object]:
        """Alignments of a batch, one language at a time (one decoder prompt per language)."""
        results: dict[int, object] = {}
        for language in {job.language for job in batch}:
            index = [i for i, job in enumerate(batch) if job.language == language]
            found = align_passes(self.model, [batch[i].audio for i in index], [batch[i].words or [] for i in index],
                                 language or "en")
            results.update(zip(index, found))
        return [results[i] for i in range(len(batch))]

    def _work(self) -> None:
        while (batch := self._queue.take()) is not None:
            start = time.perf_counter()
            try:
                if batch[0].partial:
                    results: list[object] = partial_passes(self.model, [j.audio for j in batch],
                                                           [j.language for j in batch])
                elif batch[0].kind == "align":
                    results = self._align(batch)
                else:
                    job = batch[0]
                    results = [final_pass(self.model, job.audio, job.options, self.final_window(job.options))]
            except Exception as error:  # noqa: BLE001 -- each caller gets the model's failure
                # Wrapped: a ValueError from inside the model is not the caller's bad input.
                failure = TranscriptionFailed(f"the speech-to-text model failed: {error}")
                failure.__cause__ = error
                results = [failure] * len(batch)
            busy = time.perf_counter() - start
            with self._lock:
                self._busy_s += busy
                if batch[0].partial:
                    self._counts["partials"] += len(batch)
                    self._counts["partial_batches"] += 1
                elif batch[0].kind == "align":
                    self._counts["alignments"] += len(batch)
                    self._aligned_s += sum(job.audio.size for job in batch) / SAMPLE_RATE
                else:
                    self._counts["finals"] += 1
                    self._audio_s += batch[0].audio.size / SAMPLE_RATE
            settle_futures((job.loop, job.future, result) for job, result in zip(batch, results))
