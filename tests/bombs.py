"""Decode bombs for the tests: small files that decode to hours of silence.

One second of silence is encoded, and its packets muxed again and again with
later timestamps, so an hour of audio takes a fraction of a second to make
(encoding the hour would take minutes of Opus) and a few hundred KB to hold.
"""

from __future__ import annotations

import io
import itertools

import av

__all__ = ["silence_bomb"]


def silence_bomb(codec: str, container: str, seconds: float, rate: int = 48_000) -> bytes:
    """A ``container`` file of ``codec`` (``flac``/``flac``, ``libopus``/``ogg``) holding ``seconds`` of silence."""
    out = io.BytesIO()
    with av.open(out, "w", format=container) as muxer:
        stream = muxer.add_stream(codec, rate=rate, layout="mono")
        size = stream.codec_context.frame_size or 4096
        sample_format = stream.codec_context.format.name
        packets = []
        for i in range(rate // size + 1):
            frame = av.AudioFrame(format=sample_format, layout="mono", samples=size)
            for plane in frame.planes:
                plane.update(bytes(plane.buffer_size))
            frame.sample_rate, frame.pts = rate, i * size
            packets += stream.encode(frame)
        packets += stream.encode(None)
        second = itertools.cycle([p for p in packets if p.duration] or packets)
        pts = 0
        while pts < seconds * rate:
            packet = next(second)
            packet.pts = packet.dts = pts
            pts += packet.duration or size
            muxer.mux(packet)
    return out.getvalue()
