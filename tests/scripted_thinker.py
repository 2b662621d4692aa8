"""An OpenAI-compatible chat endpoint that answers every request at once with the same sentence, streamed.

For the tests and benchmarks of a transport (WebRTC calls, phone streams): the agent thinks at it through
``--llm-url`` (lyre's real RemoteThinker over HTTP), so a turn costs the transport, the VAD, Whisper and the
TTS, not a sampled reply of varying length from a chat model loaded for the purpose. The demo TTS makes
noise until ``max_speech_tokens`` whatever the text, so a session that wants a long reply raises that.

    with thinking_at() as url:
        running_server("--stt", "--llm-url", url, "--llm-model", "scripted")
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from serving import serving_in_thread

__all__ = ["REPLY", "scripted_thinker", "thinking_at"]

REPLY = "Sure, I can help with that."


def scripted_thinker() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions() -> StreamingResponse:
        async def answer() -> AsyncIterator[str]:
            chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": REPLY}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(answer(), media_type="text/event-stream")

    return app


@contextmanager
def thinking_at() -> Iterator[str]:
    """The endpoint on a loopback port, as the base URL ``--llm-url`` takes."""
    with serving_in_thread(scripted_thinker()) as port:
        yield f"http://127.0.0.1:{port}/v1"
