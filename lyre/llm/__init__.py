"""The think step: chat completions for Llama-family chat models on lyre's engine.

A chat model (a GGUF file, a Hugging Face folder, or ``demo`` for
SmolLM2-135M-Instruct) runs on its own :class:`~lyre.engine.Engine`; its
chat template renders the messages, and its answer comes back as text deltas.
"""

from lyre.llm.chat import MAX_STOP_STRINGS, Chat, ChatBusy, ChatOptions, ChatRequestError, ChatServing, ChatStream
from lyre.llm.chat_format import DEMO, ChatFormat, demo_gguf
from lyre.llm.template import ChatTemplate, TemplateError
from lyre.llm.text_stream import StopStrings, TextStream

__all__ = [
    "DEMO",
    "MAX_STOP_STRINGS",
    "Chat",
    "ChatBusy",
    "ChatFormat",
    "ChatOptions",
    "ChatRequestError",
    "ChatServing",
    "ChatStream",
    "ChatTemplate",
    "StopStrings",
    "TemplateError",
    "TextStream",
    "demo_gguf",
]
