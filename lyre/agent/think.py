"""The think step: a chat model that answers the conversation so far, as a stream of text and tool calls.

    thinker = LocalThinker(chat)                          # lyre's in-process chat model (--llm)
    thinker = RemoteThinker(url, api_key, model)          # any OpenAI-compatible endpoint (--llm-url)
    async for piece in thinker.reply(messages, tools, ThinkOptions(max_tokens=100, tool_choice="auto")):
        ...  # str: the next text; ToolCallDelta: part of a function call; ThinkUsage: tokens, at the end

Messages are OpenAI chat messages; a session in a language other than
English tells the chat model so at the end of its instructions (`in_language`).
A failure (unreachable endpoint, an error
status, a stream that breaks off) raises `ThinkError` naming it, and closing
the iterator early frees what the reply held (the engine slot, the connection).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from lyre.llm import Chat, ChatBusy, ChatOptions, ChatRequestError
from lyre.tts.checkpoints import language_name, primary_language

__all__ = ["LocalThinker", "RemoteThinker", "ThinkError", "ThinkOptions", "ThinkUsage", "Thinker", "ToolCallDelta",
           "in_language"]

_MAX_TOKENS = 200  # a spoken reply: a few sentences
_TEMPERATURE = 0.7


class ThinkError(RuntimeError):
    """The chat model could not answer; the message says why."""


@dataclass(frozen=True)
class ToolCallDelta:
    """Part of the ``index``-th function call of a reply: its id and name come first, arguments in pieces."""

    index: int
    call_id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass(frozen=True)
class ThinkOptions:
    """One answer's limits: its tokens (None: the thinker's own limit) and OpenAI's ``tool_choice``."""

    max_tokens: int | None = None
    tool_choice: str | dict[str, Any] = "auto"


@dataclass(frozen=True)
class ThinkUsage:
    """The tokens an answer read and wrote, as its chat model counted them (the last piece of an answer)."""

    input_tokens: int
    output_tokens: int


Piece = str | ToolCallDelta | ThinkUsage


def in_language(instructions: str, language: str | None) -> str:
    """``instructions`` ending with a line that asks for replies in ``language`` (a tag such as ``de``).

    English, or no language, adds nothing: the chat models answer in English unless told otherwise, and a
    session that never named its language keeps its instructions as written."""
    code = primary_language(language)
    if code is None or code == "en":
        return instructions
    name = language_name(code)
    asked = f"Reply in {name}." if name != code else f"Reply in the language whose ISO 639-1 code is {code!r}."
    return f"{instructions}\n\n{asked}" if instructions.strip() else asked


class Thinker(Protocol):
    @property
    def supports_tools(self) -> bool: ...

    def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              options: ThinkOptions = ThinkOptions()) -> AsyncIterator[Piece]:
        """The answer to ``messages``, streamed; ``tools``: OpenAI function tools it may call."""
        ...


class LocalThinker:
    """lyre's own chat model, on its engine in this process (no tools: its template has none)."""

    supports_tools = False

    def __init__(self, chat: Chat, max_tokens: int = _MAX_TOKENS) -> None:
        self._chat = chat
        self._max_tokens = max_tokens

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    options: ThinkOptions = ThinkOptions()) -> AsyncIterator[Piece]:
        plain = [{"role": m["role"], "content": m["content"]} for m in messages
                 if m["role"] in ("system", "user", "assistant") and m.get("content")]
        limit = self._max_tokens if options.max_tokens is None else min(options.max_tokens, self._max_tokens)
        try:
            stream = self._chat.stream(plain, ChatOptions(max_tokens=limit, temperature=_TEMPERATURE))
        except (ChatBusy, ChatRequestError) as exc:
            raise ThinkError(f"chat model: {exc}") from None
        try:
            async for delta in stream:
                yield delta
            yield ThinkUsage(stream.prompt_tokens, stream.completion_tokens)
        except RuntimeError as exc:
            raise ThinkError(f"chat model: {exc}") from None
        finally:
            await stream.aclose()  # frees the engine slot at its next step


class RemoteThinker:
    """An OpenAI-compatible ``/chat/completions`` endpoint under ``url`` (e.g. ``http://host:8000/v1``), streamed."""

    supports_tools = True

    def __init__(self, url: str, api_key: str | None = None, model: str | None = None,
                 max_tokens: int = _MAX_TOKENS, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/") + "/chat/completions"
        self._model = model
        self._max_tokens = max_tokens
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(timeout_s, connect=5.0))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    options: ThinkOptions = ThinkOptions()) -> AsyncIterator[Piece]:
        limit = self._max_tokens if options.max_tokens is None else options.max_tokens
        body: dict[str, Any] = {"messages": messages, "stream": True, "max_tokens": limit,
                                "temperature": _TEMPERATURE, "stream_options": {"include_usage": True}}
        if self._model:
            body["model"] = self._model
        if tools and options.tool_choice != "none":
            body["tools"] = [{"type": "function", "function": {k: t[k] for k in ("name", "description", "parameters")
                                                                if k in t}} for t in tools]
            choice = options.tool_choice
            if choice != "auto":  # the Realtime {"type": "function", "name"} is chat's {"function": {"name"}}
                body["tool_choice"] = choice if isinstance(choice, str) else {
                    "type": "function", "function": {"name": choice["name"]}}
        try:
            async with self._client.stream("POST", self.url, json=body) as answer:
                if answer.status_code != 200:
                    text = (await answer.aread()).decode(errors="replace")[:300]
                    raise ThinkError(f"LLM at {self.url} answered {answer.status_code}: {text}")
                async for line in answer.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    for piece in _pieces(data, self.url):
                        yield piece
            raise ThinkError(f"LLM at {self.url}: the stream ended without [DONE]")
        except httpx.HTTPError as exc:
            raise ThinkError(f"LLM at {self.url} unreachable or broke off: {type(exc).__name__}: {exc}") from None


def _pieces(data: str, url: str) -> list[Piece]:
    """The text and tool-call parts of one streamed chunk."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        raise ThinkError(f"LLM at {url} sent a chunk that is not JSON: {data[:100]!r}") from None
    if not isinstance(chunk, dict):
        raise ThinkError(f"LLM at {url} sent a chunk that is not an object: {data[:100]!r}")
    if (error := chunk.get("error")) is not None:
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ThinkError(f"LLM at {url} failed mid-reply: {message}")
    out: list[Piece] = []
    if isinstance(usage := chunk.get("usage"), dict):  # the last chunk, with stream_options.include_usage
        read, wrote = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(read, int) and isinstance(wrote, int) and not isinstance(read, bool):
            out.append(ThinkUsage(read, wrote))
    for choice in _list(chunk.get("choices"), "choices", url):
        delta = _object(choice.get("delta"), "choices[].delta", url)
        if (content := delta.get("content")) is not None and not isinstance(content, str):
            raise ThinkError(f"LLM at {url} sent content that is not text: {content!r:.100}")
        if content:
            out.append(content)
        out.extend(_tool_call(call, url) for call in _list(delta.get("tool_calls"), "tool_calls", url))
    return out


def _tool_call(call: dict[str, Any], url: str) -> ToolCallDelta:
    """One streamed piece of a tool call, its fields checked (the reply bounds the index)."""
    function = _object(call.get("function"), "tool_calls[].function", url)
    index, call_id, name, arguments = (call.get("index", 0), call.get("id"), function.get("name"),
                                       function.get("arguments") or "")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ThinkError(f"LLM at {url} sent a tool call whose index is {index!r:.100}, not a whole number")
    if not all(isinstance(v, str) for v in (call_id or "", name or "", arguments)):
        raise ThinkError(f"LLM at {url} sent a tool call whose id, name or arguments are not strings: {call!r:.200}")
    return ToolCallDelta(index, call_id or None, name or None, arguments)


def _list(value: object, where: str, url: str) -> list[dict[str, Any]]:
    """A list of objects in a chunk (absent or null: none)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ThinkError(f"LLM at {url} sent {where} that is not a list: {value!r:.100}")
    return [_object(item, where, url) for item in value]


def _object(value: object, where: str, url: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ThinkError(f"LLM at {url} sent {where} that is not an object: {value!r:.100}")
    return value
