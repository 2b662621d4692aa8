"""Speech played faster or slower with its pitch kept: FFmpeg's ``atempo`` filter through PyAV, streamed.

    stretch = TimeStretch(1.5)                 # 1.5 times as fast; 1.0 passes audio through untouched
    out = stretch.push(pcm)                    # int16 mono at 24 kHz in, the same out (possibly empty)
    out = stretch.flush()                      # what the filter holds, at the end

``atempo`` takes 0.5 to 2.0 in one filter (newer FFmpeg takes more, not every
build does), so a speed outside that is a chain of filters whose factors
multiply to it (0.25 is 0.5 twice; 4.0 is 2.0 twice). The filter holds about
50 ms of audio back while it works; `flush` gives it back.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["MAX_SPEED", "MIN_SPEED", "TimeStretch"]

MIN_SPEED, MAX_SPEED = 0.25, 4.0  # OpenAI's speech API's range


class TimeStretch:
    """One stream's audio at ``speed`` times its pace; see the module docstring."""

    def __init__(self, speed: float, rate: int = 24_000) -> None:
        if not MIN_SPEED <= speed <= MAX_SPEED:
            raise ValueError(f"speed must be from {MIN_SPEED} to {MAX_SPEED}, got {speed}")
        self.speed = speed
        self.rate = rate
        self._graph: Any = None if speed == 1.0 else _graph(speed, rate)
        self._pts = 0
        self.samples_out = 0  # what it has given back

    @property
    def seconds_out(self) -> float:
        """How long the audio given back so far plays."""
        return self.samples_out / self.rate

    def push(self, pcm: np.ndarray) -> np.ndarray:
        """The next chunk (int16, mono); what the filter gives back so far."""
        out = pcm if self._graph is None else self._filter(pcm)
        self.samples_out += out.size
        return out

    def flush(self) -> np.ndarray:
        """The rest, at the end of the stream; the filter takes nothing more."""
        if self._graph is None:
            return np.zeros(0, np.int16)
        # atempo drops part of its last window at the end: silence after the audio carries the audio's own
        # tail out, and the stream ends at the length the speed makes of what came in.
        due = max(0, round(self._pts / self.speed) - self.samples_out)
        carried = self._filter(np.zeros(self.rate // 10, np.int16))
        self._graph.push(None)
        rest = np.concatenate([carried, self._pull()])[:due]
        self._graph = None
        self.samples_out += rest.size
        return rest

    def seconds(self, spoken_s: float) -> float:
        """How long ``spoken_s`` seconds of the speech as made last once played at this speed."""
        return spoken_s / self.speed

    def _filter(self, pcm: np.ndarray) -> np.ndarray:
        if pcm.size == 0:
            return np.zeros(0, np.int16)
        import av

        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm, dtype=np.int16).reshape(1, -1), format="s16",
                                           layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = self.rate, self._pts, Fraction(1, self.rate)
        self._pts += pcm.size
        self._graph.push(frame)
        return self._pull()

    def _pull(self) -> np.ndarray:
        import av

        out = []
        while True:
            try:
                out.append(self._graph.pull().to_ndarray().reshape(-1))
            except (av.BlockingIOError, av.EOFError):
                break
        return np.concatenate(out).astype(np.int16, copy=False) if out else np.zeros(0, np.int16)


def _graph(speed: float, rate: int) -> Any:
    """abuffer -> atempo x n -> abuffersink, each factor within 0.5..2.0."""
    import av

    n = max(1, math.ceil(abs(math.log(speed, 2.0)) - 1e-9))
    factor = speed ** (1.0 / n)
    graph = av.filter.Graph()
    node = graph.add_abuffer(format="s16", sample_rate=rate, layout="mono", time_base=Fraction(1, rate))
    for _ in range(n):
        tempo = graph.add("atempo", f"{factor:.6f}")
        node.link_to(tempo)
        node = tempo
    sink = graph.add("abuffersink")
    node.link_to(sink)
    graph.configure()
    return graph
