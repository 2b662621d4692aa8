"""Chat completions on the engine: messages in, text deltas out.

``Chat`` owns one engine and one chat format. ``await Chat.open(messages,
options)`` renders the model's template on a worker thread, checks the
request fits the KV cache, submits it, and returns a :class:`ChatStream` that
turns the engine's token ids into text, whole characters only, cut at the
first stop string. ``Chat.stream`` is the same for a caller with no event loop
to keep free.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from pathlib import Path

from lyre.engine import Engine, EngineConfig, EngineFull, EngineStats, FinishReason, RequestStream, SamplingParams
from lyre.engine.config import gib_to_bytes
from lyre.models.gguf import load_gguf_llama, open_gguf
from lyre.models.loader import load_llama
from lyre.llm.chat_format import DEMO, ChatFormat, chat_model_name, demo_gguf, folder_chat_format, gguf_chat_format
from lyre.llm.text_stream import TextStream
from lyre.models.folder import resolve

__all__ = ["MAX_STOP_STRINGS", "Chat", "ChatBusy", "ChatOptions", "ChatRequestError", "ChatServing", "ChatStream"]

MAX_STOP_STRINGS = 4  # OpenAI's limit


class ChatBusy(RuntimeError):
    """The chat engine's queue is full: retry later."""


@dataclass(frozen=True)
class ChatServing:
    """Where and how big the chat model's engine is: its own KV-cache budget beside any other model."""

    device: str = "cpu"
    max_batch: int = 8  # chat requests generating at once (rows of the engine)
    max_seq_len: int = 2048  # positions per request: prompt and answer together
    max_waiting: int = 256  # requests queued beyond that; more: ChatBusy
    kv_cache_gb: float | None = None  # its KV cache (None: max_batch requests of max_seq_len), shared by the block,
    # where a conversation's earlier turns stay cached for its next one
    prefix_caching: bool = True
    max_step_tokens: int | None = None  # a step's token budget: a long prompt prefills in chunks (EngineConfig's)

    def engine_config(self) -> EngineConfig:
        return EngineConfig(max_batch=self.max_batch, max_seq_len=self.max_seq_len, max_waiting=self.max_waiting,
                            device=self.device, kv_cache_bytes=gib_to_bytes(self.kv_cache_gb),
                            prefix_caching=self.prefix_caching, max_step_tokens=self.max_step_tokens)


class ChatRequestError(ValueError):
    """A request this chat model cannot serve; ``param`` names the field at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ChatOptions:
    """One request's sampling, in OpenAI's terms. ``max_tokens`` None: whatever room the context leaves."""

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.max_tokens is not None and (isinstance(self.max_tokens, bool) or self.max_tokens < 1):
            raise ChatRequestError(f"max_tokens must be >= 1, got {self.max_tokens}", "max_tokens")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature)
                and 0 <= self.temperature <= 2):
            raise ChatRequestError(f"temperature must be in [0, 2], got {self.temperature}", "temperature")
        if not (isinstance(self.top_p, (int, float)) and 0 < self.top_p <= 1):
            raise ChatRequestError(f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        if len(self.stop) > MAX_STOP_STRINGS or any(not isinstance(s, str) or not s for s in self.stop):
            raise ChatRequestError(f"stop: at most {MAX_STOP_STRINGS} non-empty strings", "stop")


class Chat:
    """A chat model served by its own engine."""

    def __init__(self, engine: Engine, chat_format: ChatFormat) -> None:
        self.engine = engine
        self.format = chat_format

    @classmethod
    def load(cls, model: str, serving: ChatServing | None = None, name: str | None = None) -> Chat:
        """Load ``model`` (a .gguf file, a Hugging Face folder or hub id, or ``demo``) onto an engine."""
        config = (serving or ChatServing()).engine_config()
        if model == DEMO:
            model = str(demo_gguf())
        path = Path(model).expanduser()
        name = name or chat_model_name(path)
        dtype = config.resolved_dtype
        if path.suffix == ".gguf":
            reader = open_gguf(path)  # parsed once, for the weights and the tokenizer
            chat_format = gguf_chat_format(reader, name)
            weights = load_gguf_llama(reader, config.max_seq_len, config.device, dtype)
        else:
            folder = resolve(model, required=("config.json", "tokenizer.json"))
            chat_format = folder_chat_format(folder, name)
            weights = load_llama(folder, config.max_seq_len, config.device, dtype)
        return cls(Engine(weights, config), chat_format)

    @property
    def name(self) -> str:
        return self.format.name

    @property
    def max_seq_len(self) -> int:
        return self.engine.config.max_seq_len

    async def open(self, messages: list[dict[str, str]], options: ChatOptions,
                   request_id: str | None = None) -> ChatStream:
        """Submit a chat request; iterate the result for its text. Raises ChatRequestError for one that cannot
        fit the context, and ChatBusy when the engine's queue is full.

        The prompt is rendered and tokenized on a worker thread: a long conversation takes milliseconds of
        template and tokenizer, which every other stream on the event loop would otherwise wait out.
        """
        prompt = await asyncio.to_thread(self.format.prompt_ids, messages)
        return self._submit(prompt, options, request_id)

    def stream(self, messages: list[dict[str, str]], options: ChatOptions, request_id: str | None = None) -> ChatStream:
        """`open`, rendering on the calling thread: for callers with no event loop to keep free (the CLI)."""
        return self._submit(self.format.prompt_ids(messages), options, request_id)

    def _submit(self, prompt: list[int], options: ChatOptions, request_id: str | None) -> ChatStream:
        room = self.max_seq_len - len(prompt)
        if room < 1:
            raise ChatRequestError(f"messages: the prompt is {len(prompt)} tokens, and this model's context holds "
                                   f"{self.max_seq_len} (prompt and answer together)", "messages")
        max_tokens = options.max_tokens if options.max_tokens is not None else room
        if max_tokens > room:
            raise ChatRequestError(f"max_tokens: {max_tokens} does not fit: the prompt is {len(prompt)} tokens and "
                                   f"the context holds {self.max_seq_len}, so at most {room} remain", "max_tokens")
        sampling = SamplingParams(temperature=float(options.temperature), top_p=float(options.top_p), top_k=0,
                                  repetition_penalty=1.0, max_tokens=max_tokens, stop_ids=self.format.stop_ids,
                                  seed=options.seed)
        try:
            tokens = self.engine.generate(prompt, sampling, request_id=request_id)
        except EngineFull as exc:
            raise ChatBusy(str(exc)) from None
        return ChatStream(tokens, TextStream(self.format.tokenizer, options.stop), len(prompt))

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def close(self) -> None:
        self.engine.shutdown()


class ChatStream:
    """Async iterator over one answer's text deltas. Closing it (or cancelling its consumer) frees the slot."""

    def __init__(self, tokens: RequestStream, text: TextStream, prompt_tokens: int) -> None:
        self._tokens = tokens
        self._text = text
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = 0  # tokens the model generated, its end-of-turn token included
        self.finish_reason: str | None = None  # OpenAI's: "stop" or "length", once the answer is over
        self.started_at = time.perf_counter()
        self.first_token_at: float | None = None

    @property
    def request_id(self) -> str:
        return self._tokens.request_id

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> str:
        while self.finish_reason is None:
            try:
                token = await self._tokens.__anext__()
            except StopAsyncIteration:
                self._finish()
                tail = self._text.finish()
                if tail:
                    return tail
                break
            self._count()
            delta = self._text.feed(token)
            if self._text.stopped:
                self.finish_reason = "stop"
                await self._tokens.aclose()  # a stop string ends the request: free the slot now
            if delta:
                return delta
        raise StopAsyncIteration

    async def aclose(self) -> None:
        """Stop consuming: the engine frees the request's slot at its next step."""
        await self._tokens.aclose()

    async def text(self) -> str:
        """The whole answer, once it is done."""
        return "".join([delta async for delta in self])

    def _count(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
        self.completion_tokens += 1

    def _finish(self) -> None:
        reason = self._tokens.finish_reason
        if reason is FinishReason.STOP:
            self._count()  # the end-of-turn token was generated, though never handed over
            self.finish_reason = "stop"
        elif reason is FinishReason.LENGTH:
            self.finish_reason = "length"
        else:  # aborted (the engine shut down) or failed: no answer to finish
            raise RuntimeError(f"chat request {self.request_id} ended without an answer ({reason})")
