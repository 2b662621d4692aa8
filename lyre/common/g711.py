"""G.711, both laws: pcm16 to a byte a sample and back, as the C reference (and Python's old ``audioop``)
computes it, by table look-up (``audioop`` is gone in Python 3.13).

    ulaw = ulaw_encode(pcm)     # mu-law (PCMU): a 14-bit magnitude, biased by 33, in 8 segments of 16 steps,
    pcm = ulaw_decode(ulaw)     #   every bit inverted
    alaw = alaw_encode(pcm)     # A-law (PCMA): a 13-bit magnitude in 8 segments, even bits inverted
    pcm = alaw_decode(alaw)
"""

from __future__ import annotations

import numpy as np

__all__ = ["alaw_decode", "alaw_encode", "ulaw_decode", "ulaw_encode"]


def _encode_table() -> np.ndarray:
    """The mu-law byte of every pcm16 value, indexed by the value's two bytes as a uint16, shape (65536,)."""
    pcm = np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32) >> 2  # 14-bit
    negative = pcm < 0
    magnitude = np.minimum(np.where(negative, -pcm, pcm), 8159) + 33
    segment = np.searchsorted(np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF]), magnitude)
    code = np.where(segment >= 8, 0x7F, (segment << 4) | ((magnitude >> (segment + 1)) & 0xF))
    return (code ^ np.where(negative, 0x7F, 0xFF)).astype(np.uint8)


def _decode_table() -> np.ndarray:
    """The pcm16 value of every mu-law byte, shape (256,)."""
    code = ~np.arange(256, dtype=np.int32) & 0xFF
    magnitude = (((code & 0x0F) << 3) + 0x84) << ((code & 0x70) >> 4)
    return np.where(code & 0x80, 0x84 - magnitude, magnitude - 0x84).astype("<i2")


_ENCODE = _encode_table()
_DECODE = _decode_table()


def ulaw_encode(pcm: bytes) -> bytes:
    """pcm16 (little-endian) to mu-law, a byte a sample."""
    return _ENCODE[np.frombuffer(pcm, dtype="<u2")].tobytes()


def ulaw_decode(ulaw: bytes) -> bytes:
    """mu-law to pcm16 (little-endian), two bytes a sample."""
    return _DECODE[np.frombuffer(ulaw, dtype=np.uint8)].tobytes()


def _alaw_encode_table() -> np.ndarray:
    """The A-law byte of every pcm16 value, indexed by the value's two bytes as a uint16, shape (65536,)."""
    pcm = np.arange(65536, dtype=np.uint16).view(np.int16).astype(np.int32) >> 3  # 13-bit
    negative = pcm < 0
    magnitude = np.where(negative, -pcm - 1, pcm)
    segment = np.searchsorted(np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF]), magnitude)
    step = np.where(segment < 2, magnitude >> 1, magnitude >> np.maximum(segment, 1)) & 0x0F
    code = np.where(segment >= 8, 0x7F, (np.minimum(segment, 7) << 4) | step)
    return (code ^ np.where(negative, 0x55, 0xD5)).astype(np.uint8)


def _alaw_decode_table() -> np.ndarray:
    """The pcm16 value of every A-law byte, shape (256,)."""
    code = np.arange(256, dtype=np.int32) ^ 0x55
    segment = (code & 0x70) >> 4
    step = (code & 0x0F) << 4
    magnitude = np.where(segment == 0, step + 8, (step + 0x108) << np.maximum(segment - 1, 0))
    return np.where(code & 0x80, magnitude, -magnitude).astype("<i2")


_ALAW_ENCODE = _alaw_encode_table()
_ALAW_DECODE = _alaw_decode_table()


def alaw_encode(pcm: bytes) -> bytes:
    """pcm16 (little-endian) to A-law, a byte a sample."""
    return _ALAW_ENCODE[np.frombuffer(pcm, dtype="<u2")].tobytes()


def alaw_decode(alaw: bytes) -> bytes:
    """A-law to pcm16 (little-endian), two bytes a sample."""
    return _ALAW_DECODE[np.frombuffer(alaw, dtype=np.uint8)].tobytes()
