"""The voice agent thinking at ``--llm-url``: a real ``lyre serve --stt --llm-url`` whose endpoint is a small
OpenAI-compatible front in this process, which passes ordinary turns to a second real lyre process serving
chat (``--no-tts --llm demo``) and scripts what SmolLM2 cannot do: a function call, and a reply that fails
part way."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from serving import Server, running_server, serving_in_thread
from test_agent import SHORT, Talk
from websockets.asyncio.client import connect

from lyre.agent import RemoteThinker, ThinkError

TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def _chunk(delta: dict[str, Any]) -> str:
    return "data: " + json.dumps({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta}]}) + "\n\n"


def _front(chat_url: str) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        last = body["messages"][-1]

        async def scripted(*parts: str) -> AsyncIterator[str]:
            for part in parts:
                yield part

        if last["role"] == "tool":
            return StreamingResponse(scripted(_chunk({"content": f"The weather report says {last['content']}. "}),
                                              "data: [DONE]\n\n"), media_type="text/event-stream")
        if "weather" in last["content"] and body.get("tools"):
            call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                                                  "arguments": '{"city": '}}
            return StreamingResponse(scripted(
                _chunk({"tool_calls": [call]}),
                _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
                "data: [DONE]\n\n"), media_type="text/event-stream")
        if "break" in last["content"]:
            return StreamingResponse(scripted(_chunk({"content": "I will "}),
                                              'data: {"error": {"message": "the model crashed"}}\n\n'),
                                     media_type="text/event-stream")

        async def passed_on() -> AsyncIterator[bytes]:
            async with httpx.AsyncClient(timeout=120) as client:
                async with client.stream("POST", f"{chat_url}/v1/chat/completions", json=body) as answer:
                    async for piece in answer.aiter_bytes():
                        yield piece

        return StreamingResponse(passed_on(), media_type="text/event-stream")

    return app


@pytest.fixture(scope="module")
def agent() -> Iterator[Server]:
    with running_server("--no-tts", "--llm", "demo", "--llm-max-batch", "2", "--llm-max-seq-len", "1024") as chat:
        with serving_in_thread(_front(chat.url)) as port:
            with running_server("--stt", "--llm-url", f"http://127.0.0.1:{port}/v1", "--llm-model", "smol",
                                "--no-smart-turn") as running:
                yield running


def _say(text: str) -> dict[str, Any]:
    return {"type": "conversation.item.create",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}


async def _ask(talk: Talk, text: str) -> dict[str, Any]:
    """A typed user turn and its reply: the reply's response.done."""
    await talk.send(_say(text))
    await talk.send({"type": "response.create"})
    return await talk.until("response.done", count=len(talk.of("response.done")) + 1)


def _typed(agent: Server, *texts: str) -> Talk:
    """A conversation of typed turns, one reply each."""
    async def run() -> Talk:
        async with connect(f"{agent.ws_url}/v1/realtime", max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {"type": "realtime", "max_speech_tokens": SHORT}})
            for text in texts:
                await _ask(talk, text)
            return talk

    return asyncio.run(run())


def test_a_reply_from_another_lyre_process(agent: Server) -> None:
    talk = _typed(agent, "What is the capital of France?")
    done = talk.of("response.done")[0]["response"]
    assert done["status"] == "completed", done
    said = talk.of("response.output_audio_transcript.done")[0]["transcript"]
    assert said.strip() and talk.of("response.output_audio.delta")


def test_a_function_call_and_its_output_continue_the_reply(agent: Server) -> None:
    async def run() -> Talk:
        async with connect(f"{agent.ws_url}/v1/realtime", max_size=None) as ws:
            talk = Talk(ws)
            await talk.send({"type": "session.update", "session": {"type": "realtime", "tools": TOOLS,
                                                                    "max_speech_tokens": SHORT}})
            await talk.until("session.updated")
            first = (await _ask(talk, "What is the weather in Paris?"))["response"]
            call = next(item for item in first["output"] if item["type"] == "function_call")
            await talk.send({"type": "conversation.item.create", "item": {
                "type": "function_call_output", "call_id": call["call_id"], "output": "sunny, 21 degrees"}})
            await talk.send({"type": "response.create"})
            await talk.until("response.done", count=2)
            return talk

    talk = asyncio.run(run())
    first, second = (e["response"] for e in talk.of("response.done"))
    assert first["status"] == "completed"
    (call,) = [item for item in first["output"] if item["type"] == "function_call"]
    assert call["name"] == "get_weather" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert "".join(e["delta"] for e in talk.of("response.function_call_arguments.delta")) == call["arguments"]
    assert talk.of("response.function_call_arguments.done")[0]["arguments"] == call["arguments"]
    assert second["status"] == "completed"
    assert "sunny, 21 degrees" in talk.of("response.output_audio_transcript.done")[-1]["transcript"]


def test_an_llm_that_fails_mid_reply_is_named_and_the_session_goes_on(agent: Server) -> None:
    talk = _typed(agent, "Please break.", "Say hello.")
    failed, ok = (e["response"] for e in talk.of("response.done"))
    assert failed["status"] == "failed" and "the model crashed" in failed["status_details"]["error"]["message"]
    (error,) = talk.of("error")
    assert error["error"]["code"] == "response_failed" and "the model crashed" in error["error"]["message"]
    assert ok["status"] == "completed"


def test_an_unreachable_endpoint_is_named() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    thinker = RemoteThinker(f"http://127.0.0.1:{port}/v1")

    async def run() -> None:
        try:
            async for _ in thinker.reply([{"role": "user", "content": "Hi"}], []):
                pass
        finally:
            await thinker.aclose()

    with pytest.raises(ThinkError, match=f"127.0.0.1:{port}/v1/chat/completions unreachable"):
        asyncio.run(run())
