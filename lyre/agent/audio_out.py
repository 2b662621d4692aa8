"""A reply's audio as the session's output asks: at its speed (pitch kept), as pcm16 at 24 kHz or G.711 at 8 kHz.

    out = AudioOut("pcmu", speed=1.25)
    payload = out.push(pcm24k) + out.flush()     # mu-law at 8 kHz, a byte a sample, 1.25 times as fast
"""

from __future__ import annotations

import numpy as np

from lyre.common.g711 import alaw_encode, ulaw_encode
from lyre.common.resample import Resampler
from lyre.common.tempo import TimeStretch

__all__ = ["AudioOut"]

_SPOKEN_RATE = 24_000
_G711_RATE = 8_000


class AudioOut:
    """One reply's audio on its way out at ``speed``, in ``encoding`` (pcm16, pcmu or pcma), the filters' state
    kept between chunks."""

    def __init__(self, encoding: str, speed: float = 1.0) -> None:
        self.encoding = encoding
        self._stretch = TimeStretch(speed, _SPOKEN_RATE)
        self._encode = {"pcmu": ulaw_encode, "pcma": alaw_encode}.get(encoding)
        self._resampler = Resampler(_SPOKEN_RATE, _G711_RATE, 1) if self._encode is not None else None

    def push(self, pcm: np.ndarray) -> bytes:
        """The next chunk of int16 at 24 kHz as made, ready to send (possibly empty while the filters fill)."""
        return self._out(self._stretch.push(pcm).astype("<i2", copy=False).tobytes())

    def flush(self) -> bytes:
        """What the filters still hold, at the reply's end."""
        rest = self._out(self._stretch.flush().astype("<i2", copy=False).tobytes())
        if self._encode is None or self._resampler is None:
            return rest
        tail = rest + self._encode(self._resampler.flush())
        self._resampler.close()
        return tail

    def _out(self, pcm: bytes) -> bytes:
        if self._encode is None or self._resampler is None:
            return pcm
        return self._encode(self._resampler.push(pcm))
