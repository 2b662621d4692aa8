"""A stand-in speech server for the quality gate's own tests, run as its own process: it speaks with espeak-ng,
so its audio is real speech whose words and voice are known, which no model here can make (the demo model's
random weights make noise).

    python tests/eval/espeak_stub.py --port PORT [--variant +f3]

``POST /v1/audio/speech`` (pcm: 24 kHz s16le, or wav): the input spoken by espeak-ng in the voice named
(an espeak-ng voice such as en-us), with ``--variant`` appended (+f3: another speaker, the same words).
``/v1/models`` lists no speech to text, as a lyre server without --stt.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import uvicorn
from fastapi import FastAPI
from fastapi.responses import Response
from pydantic import BaseModel
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' espeak-ng, run as a script too
from speech import speak, wav_bytes  # noqa: E402

RATE = 24_000


class Speech(BaseModel):
    input: str
    voice: str = "en-us"
    response_format: str = "pcm"


def make_app(variant: str) -> FastAPI:
    app = FastAPI()

    @app.get("/ready")
    async def ready() -> dict[str, bool]:
        return {"ready": True}

    @app.get("/v1/models")
    async def models() -> dict[str, object]:
        return {"object": "list", "data": [{"id": "orpheus", "object": "model", "created": 0, "owned_by": "stub"}]}

    @app.post("/v1/audio/speech")
    async def speech(body: Speech) -> Response:
        wav = wav_bytes(speak(body.input, RATE, voice=body.voice + variant), RATE)
        if body.response_format == "wav":
            return Response(wav, media_type="audio/wav")
        return Response(wav[44:], media_type="audio/pcm")  # the samples after the 44-byte header

    return app


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--variant", default="")
    args = parser.parse_args()
    uvicorn.run(make_app(args.variant), host="127.0.0.1", port=args.port, log_level="warning")
