"""``POST /v1/chat/completions``: OpenAI's chat completions API on the served chat model."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException

from lyre.llm import ChatBusy, ChatOptions, ChatStream
from lyre.server.admission import Overloaded
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.state import ServerState

__all__ = ["ChatCompletionRequest", "router"]

router = APIRouter()


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """OpenAI's chat completion request: the fields a text-only chat model can honour."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field("", max_length=200, description="Any name: the server runs one chat model")
    messages: list[ChatMessage] = Field(..., min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1, description="Wins over max_tokens, as at OpenAI")
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=0, lt=2**63)
    n: int = Field(1, description="Only 1")
    frequency_penalty: float = Field(0.0, description="Only 0")
    presence_penalty: float = Field(0.0, description="Only 0")
    logprobs: bool = Field(False, description="Only false")
    tools: list[dict[str, Any]] | None = Field(None, description="Not supported")

    def options(self) -> ChatOptions:
        """The request's sampling; a field this server cannot honour is a 400 naming it."""
        if self.n != 1:
            raise InvalidParam(f"n: only 1 choice per request is supported, got {self.n}", "n")
        for name in ("frequency_penalty", "presence_penalty"):
            if getattr(self, name):
                raise InvalidParam(f"{name}: not supported (leave it 0)", name)
        if self.logprobs:
            raise InvalidParam("logprobs: not supported", "logprobs")
        if self.tools:
            raise InvalidParam("tools: tool calling is not supported by this server", "tools")
        if self.stream_options is not None and not self.stream:
            raise InvalidParam("stream_options: only allowed when stream is true", "stream_options")
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return ChatOptions(
            max_tokens=self.max_completion_tokens or self.max_tokens,
            temperature=1.0 if self.temperature is None else self.temperature,
            top_p=1.0 if self.top_p is None else self.top_p,
            seed=self.seed,
            stop=stop,
        )

    def plain_messages(self) -> list[dict[str, str]]:
        """Messages as the chat template expects them: a role and string content."""
        plain = []
        for i, message in enumerate(self.messages):
            content = message.content
            if content is None:
                raise InvalidParam(f"messages[{i}].content: required (tool calls are not supported)",
                                   f"messages[{i}].content")
            if isinstance(content, list):
                content = "\n".join(part.text for part in content)  # text parts joined, as vLLM does
            role = "system" if message.role == "developer" else message.role  # OpenAI's newer name for system
            plain.append({"role": role, "content": content})
        return plain


@router.post(
    "/v1/chat/completions",
    responses={200: {"description": "The answer, or with stream: true its chunks as server-sent events",
                     "content": {"application/json": {}, "text/event-stream": {}}},
               404: error_doc("Chat completions are not served by this server"),
               503: error_doc("The server is shutting down")},
)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Any:
    state: ServerState = request.app.state.lyre
    chat = state.require_chat()
    if state.draining:
        raise HTTPException(503, "server is shutting down")
    options = body.options()
    completion_id = f"chatcmpl-{uuid.uuid4().hex}"
    try:
        stream = await chat.open(body.plain_messages(), options, request_id=completion_id)
    except ChatBusy as exc:
        raise Overloaded(f"chat model is at capacity ({exc}); retry shortly", retry_after_s=1) from None
    reply = _Reply(completion_id, chat.name)
    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage
        return StreamingResponse(_chunks(state, stream, reply, include_usage), media_type="text/event-stream")
    return await _whole(state, stream, reply, request)


class _Reply:
    """The fields every response and chunk of one completion share."""

    def __init__(self, completion_id: str, model: str) -> None:
        self.head = {"id": completion_id, "object": "chat.completion", "created": int(time.time()), "model": model,
                     "system_fingerprint": None}

    def completion(self, text: str, stream: ChatStream) -> dict[str, Any]:
        message = {"role": "assistant", "content": text, "refusal": None}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": stream.finish_reason}
        return {**self.head, "choices": [choice], "usage": _usage(stream)}

    def chunk(self, delta: dict[str, str], finish_reason: str | None = None, usage: bool = False) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        event = {**self.head, "object": "chat.completion.chunk", "choices": [choice]}
        if usage:
            event["usage"] = None  # every chunk carries the key when usage is asked for; the last one fills it
        return _sse(event)

    def usage_chunk(self, stream: ChatStream) -> bytes:
        return _sse({**self.head, "object": "chat.completion.chunk", "choices": [], "usage": _usage(stream)})


def _usage(stream: ChatStream) -> dict[str, int]:
    return {"prompt_tokens": stream.prompt_tokens, "completion_tokens": stream.completion_tokens,
            "total_tokens": stream.prompt_tokens + stream.completion_tokens}


def _sse(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, ensure_ascii=False)}\n\n".encode()


async def _chunks(state: ServerState, stream: ChatStream, reply: _Reply, include_usage: bool) -> AsyncIterator[bytes]:
    """Server-sent chunks as the text comes; a client that leaves cancels this, which frees the slot."""
    outcome = "cancelled"
    state.chat_active += 1
    try:
        yield reply.chunk({"role": "assistant", "content": ""}, usage=include_usage)
        timed = False
        async for delta in stream:
            if not timed:
                timed = _observe_ttft(state, stream)
            yield reply.chunk({"content": delta}, usage=include_usage)
        assert stream.finish_reason is not None
        yield reply.chunk({}, stream.finish_reason, usage=include_usage)
        if include_usage:
            yield reply.usage_chunk(stream)
        yield b"data: [DONE]\n\n"
        outcome = "ok"
    except Exception:
        outcome = "error"
        raise
    finally:
        _record(state, stream, "stream", outcome)
        await stream.aclose()


async def _whole(state: ServerState, stream: ChatStream, reply: _Reply, request: Request) -> Response:
    """The whole answer; a client that leaves before it is done ends the generation."""
    outcome = "cancelled"
    state.chat_active += 1
    answer = asyncio.ensure_future(stream.text())
    left = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((answer, left), return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            return Response(status_code=499)  # nobody is there to read it
        try:
            text = answer.result()
        except Exception:
            outcome = "error"
            raise
        _observe_ttft(state, stream)
        outcome = "ok"
        return JSONResponse(reply.completion(text, stream))
    finally:
        for task in (answer, left):
            task.cancel()
        _record(state, stream, "json", outcome)
        await stream.aclose()


async def _disconnected(request: Request) -> None:
    """Returns when the client goes away (the body is already read, so nothing else arrives)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _observe_ttft(state: ServerState, stream: ChatStream) -> bool:
    """Record the time to the first token once there is one; True when recorded."""
    if stream.first_token_at is None:
        return False
    state.metrics.chat_ttft.observe(stream.first_token_at - stream.started_at)
    return True


def _record(state: ServerState, stream: ChatStream, mode: str, outcome: str) -> None:
    state.chat_active -= 1
    metrics = state.metrics
    metrics.chat_requests.labels(mode, outcome).inc()
    metrics.chat_tokens.labels("prompt").inc(stream.prompt_tokens)
    metrics.chat_tokens.labels("completion").inc(stream.completion_tokens)
