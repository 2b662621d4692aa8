"""A reply's audio as the session's output format asks: pcm16 at 24 kHz as spoken, or G.711 at 8 kHz.

    out = AudioOut("pcmu")
    payload = out.push(pcm24k) + out.flush()     # mu-law at 8 kHz, a byte a sample
"""

from __future__ import annotations

from lyre.common.g711 import alaw_encode, ulaw_encode
from lyre.common.resample import Resampler

__all__ = ["AudioOut"]

_SPOKEN_RATE = 24_000
_G711_RATE = 8_000


class AudioOut:
    """One reply's audio on its way out in ``encoding`` (pcm16, pcmu or pcma), the resampler's state kept
    between chunks."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._encode = {"pcmu": ulaw_encode, "pcma": alaw_encode}.get(encoding)
        self._resampler = Resampler(_SPOKEN_RATE, _G711_RATE, 1) if self._encode is not None else None

    def push(self, pcm: bytes) -> bytes:
        """The next chunk of pcm16 at 24 kHz, encoded (possibly empty while the filter fills)."""
        if self._encode is None or self._resampler is None:
            return pcm
        return self._encode(self._resampler.push(pcm))

    def flush(self) -> bytes:
        """What the filter still holds, at the reply's end."""
        if self._encode is None or self._resampler is None:
            return b""
        tail = self._encode(self._resampler.flush())
        self._resampler.close()
        return tail
