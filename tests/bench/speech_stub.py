"""A stand-in speech server for the bench's own tests, run as its own process: its audio opens with 300 ms
of silence, then plays 100 ms chunks of a tone, the last one late, so what the bench measures (the first
byte, the first sample, the first audible sample, a playback underrun) is known beforehand.

    python tests/bench/speech_stub.py --port PORT

``POST /v1/audio/speech`` (s16le, 24 kHz): at once 0.3 s of zeros; at 0.2 s, 0.1 s of tone; at 0.25 s
another; at 0.55 s the last (the listener, who started at 0.2 s, ran dry at 0.4 s: a 0.15 s underrun).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import AsyncIterator

import numpy as np
import uvicorn
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

RATE = 24_000
SILENCE = bytes(2 * int(0.3 * RATE))
TONE = (8000 * np.sin(2 * np.pi * 440 * np.arange(int(0.1 * RATE)) / RATE)).astype("<i2").tobytes()
SCHEDULE = ((0.0, SILENCE), (0.2, TONE), (0.25, TONE), (0.55, TONE))  # (seconds after the request, audio)

app = FastAPI()


@app.get("/ready")
async def ready() -> dict[str, bool]:
    return {"ready": True}


@app.post("/v1/audio/speech")
async def speech() -> StreamingResponse:
    async def audio() -> AsyncIterator[bytes]:
        start = time.monotonic()
        for at, data in SCHEDULE:
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            yield data

    return StreamingResponse(audio(), media_type="audio/pcm")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    uvicorn.run(app, host="127.0.0.1", port=parser.parse_args().port, log_level="warning")
