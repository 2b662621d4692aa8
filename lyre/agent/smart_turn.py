"""Smart Turn v3: a semantic end-of-turn model, batched across sessions on one worker thread.

    smart_turn = SmartTurn.load()                 # the ONNX file the pipecat-ai wheel ships, or a path
    probability = await smart_turn(audio)         # 16 kHz float32: the turn so far; 0..1 that it is over

The model (BSD-2-Clause, from Pipecat) is a small Whisper-encoder classifier
over the last 8 s of the speaker's audio, as 80 log-mel bins by 800 frames;
the waveform is normalised to zero mean and unit variance and padded with
silence after it, as the model was trained. Requests that arrive while a batch
runs go together into the next one: one ONNX run serves every session waiting.
"""

from __future__ import annotations

import asyncio
import os
from importlib.util import find_spec
from pathlib import Path

import numpy as np

__all__ = ["SmartTurn", "find_smart_turn"]

_SECONDS = 8
_RATE = 16_000
_FRAMES = 800  # 10 ms mel frames in 8 s
_FILE = "smart-turn-v3.2-cpu.onnx"
_MAX_BATCH = 16


def find_smart_turn() -> Path | None:
    """The model file inside the installed pipecat-ai wheel, if it is there."""
    spec = find_spec("pipecat")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "audio" / "turn" / "smart_turn" / "data" / _FILE
    return path if path.is_file() else None


class SmartTurn:
    """Callable: the probability that a turn is complete, from its audio."""

    def __init__(self, path: str | os.PathLike[str], threads: int = 1) -> None:
        import onnxruntime as ort
        from faster_whisper.feature_extractor import FeatureExtractor

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._features = FeatureExtractor(feature_size=80, chunk_length=_SECONDS)
        self._queue: list[tuple[np.ndarray, asyncio.Future[float]]] = []
        self._running = False
        self.batches = 0
        self.scored = 0

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None) -> SmartTurn:
        """From ``path``, else from the pipecat-ai wheel; FileNotFoundError saying how to get it."""
        found = Path(path) if path is not None else find_smart_turn()
        if found is None or not found.is_file():
            raise FileNotFoundError(f"Smart Turn model {_FILE} not found ({path or 'pipecat-ai is not installed'}): "
                                    "install pipecat-ai, or pass the file's path")
        return cls(found)

    async def __call__(self, audio: np.ndarray) -> float:
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._queue.append((audio, future))
        if not self._running:
            self._running = True
            asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        """Score the queue in batches until it is empty (the requests that came during a batch form the next)."""
        try:
            while self._queue:
                batch, self._queue = self._queue[:_MAX_BATCH], self._queue[_MAX_BATCH:]
                live = [(audio, future) for audio, future in batch if not future.done()]
                if not live:
                    continue
                try:
                    scores = await asyncio.to_thread(self._score, [audio for audio, _ in live])
                except Exception as exc:  # a broken model must not hang its callers
                    for _, future in live:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.batches += 1
                self.scored += len(live)
                for (_, future), score in zip(live, scores):
                    if not future.done():
                        future.set_result(score)
        finally:
            self._running = False

    def _score(self, audios: list[np.ndarray]) -> list[float]:
        features = np.stack([self._mel(audio) for audio in audios])  # (n, 80, 800)
        (out,) = self._session.run(None, {"input_features": features})  # (n, 1): already a probability
        return [float(p) for p in np.asarray(out).reshape(-1)]

    def _mel(self, audio: np.ndarray) -> np.ndarray:
        samples = _SECONDS * _RATE
        audio = np.asarray(audio, np.float32)[-samples:]
        audio = (audio - audio.mean()) / np.sqrt(audio.var() + 1e-7)
        audio = np.concatenate([audio, np.zeros(samples - audio.size, np.float32)])
        return self._features(audio, padding=0)[:, :_FRAMES].astype(np.float32)  # (80, 800)
