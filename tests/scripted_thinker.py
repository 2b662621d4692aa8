"""An OpenAI-compatible chat endpoint that answers every request at once with the same sentence, streamed;
and, when the request offers a tool named ``end_call`` (or else ``transfer_call``), a call of it after the
sentence (a transfer to "sales"); or, to a last
message of ``IN_TWO_PARTS``, with a sentence, and another once the test sets ``SECOND_PART``
(a think step that stalls mid-reply, so the reply's speech runs dry between them).

For agent frameworks' own tools: a user message that mentions the weather, in a request that offers a tool
named ``get_weather``, is answered with ``CHECKING`` and a call of it for Paris; the tool's output is
answered with ``SUNNY``; a user message that asks for a ``story`` is answered with ``STORY`` (several
sentences, for a reply long enough to talk over). Every answer ends with a ``usage`` chunk, as endpoints
asked for ``stream_options.include_usage`` send.

For the tests and benchmarks of a transport (WebRTC calls, phone streams): the agent thinks at it through
``--llm-url`` (lyre's real RemoteThinker over HTTP), so a turn costs the transport, the VAD, Whisper and the
TTS, not a sampled reply of varying length from a chat model loaded for the purpose. The demo TTS makes
noise until ``max_speech_tokens`` whatever the text, so a session that wants a long reply raises that.

    with thinking_at() as url:
        running_server("--stt", "--llm-url", url, "--llm-model", "scripted")
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from serving import serving_in_thread

__all__ = ["ASKED", "CHECKING", "IN_TWO_PARTS", "REPLY", "SECOND_PART", "STORY", "SUNNY", "scripted_thinker",
           "thinking_at"]

REPLY = "Sure, I can help with that."
CHECKING = "Let me check the weather."
SUNNY = "It is sunny in Paris today."
STORY = ("Once upon a time a fox lived at the edge of a wide green forest. Every night it walked down to the "
         "river to look at the moon. One night the moon was not in the sky but deep in the water. The fox "
         "jumped in to bring it home, and swam until morning. When the sun came up, the moon was gone.")
IN_TWO_PARTS = "Answer in two parts."
SECOND_PART = threading.Event()  # set: the reply in two parts waiting says its second (and it is cleared)
_PARTS = ("One moment.", " Here it is, all of it.")
_LONGEST_PAUSE_S = 30.0  # a second part nobody asked for goes after this
ASKED: list[list[dict]] = []  # each request's messages, in order (what the agent told the think step)


def scripted_thinker() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        messages = body["messages"]
        ASKED.append(messages)
        offered = {tool.get("function", {}).get("name") for tool in body.get("tools") or []}
        # A phone call's tools, end_call or transfer_call (to "sales"), called after the reply's sentence.
        tool = next((name for name in ("end_call", "transfer_call") if name in offered), None)
        last = messages[-1]
        said = str(last.get("content") or "").lower()
        weather = "get_weather" in offered and last.get("role") == "user" and "weather" in said
        if weather:
            tool = "get_weather"
        if last.get("role") == "tool":
            parts: tuple[str, ...] = (SUNNY,)
        elif weather:
            parts = (CHECKING,)
        elif "story" in said:
            parts = (STORY,)
        else:
            parts = _PARTS if last.get("content") == IN_TWO_PARTS else (REPLY,)

        async def answer() -> AsyncIterator[str]:
            for i, part in enumerate(parts):
                if i:
                    await asyncio.to_thread(SECOND_PART.wait, _LONGEST_PAUSE_S)
                    SECOND_PART.clear()
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": part}}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            if tool is not None:
                arguments = json.dumps({"target": "sales"} if tool == "transfer_call"
                                       else {"city": "Paris"} if tool == "get_weather" else {})
                call = {"index": 0, "id": f"call_{len(ASKED)}", "type": "function",
                        "function": {"name": tool, "arguments": arguments}}
                chunk = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"tool_calls": [call]}}]}
                yield f"data: {json.dumps(chunk)}\n\n"
            usage = {"prompt_tokens": sum(len(str(m.get("content") or "").split()) for m in messages),
                     "completion_tokens": sum(len(p.split()) for p in parts), "total_tokens": 0}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            yield f"data: {json.dumps({'object': 'chat.completion.chunk', 'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"
        return StreamingResponse(answer(), media_type="text/event-stream")

    return app


@contextmanager
def thinking_at() -> Iterator[str]:
    """The endpoint on a loopback port, as the base URL ``--llm-url`` takes."""
    with serving_in_thread(scripted_thinker()) as port:
        yield f"http://127.0.0.1:{port}/v1"
