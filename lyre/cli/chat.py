"""``lyre chat``: answer a question with a chat model, streamed to stdout."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import TYPE_CHECKING

from lyre.models.choice import add_device_arg

if TYPE_CHECKING:
    from lyre.llm import Chat, ChatOptions

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = sub.add_parser("chat", help="answer a question with a chat model, streamed to stdout")
    chat.add_argument("question")
    chat.add_argument("--llm", default="demo", metavar="PATH",
                      help="a .gguf file, a Hugging Face folder or hub id, or demo (default: demo, SmolLM2-135M)")
    chat.add_argument("--system", help="a system message to put first")
    chat.add_argument("--max-tokens", type=int, default=512)
    chat.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: 0)")
    chat.add_argument("--seed", type=int, default=None)
    add_device_arg(chat)
    chat.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre.llm import Chat, ChatOptions, ChatServing

    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.question})
    options = ChatOptions(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    chat = Chat.load(args.llm, ChatServing(device=args.device, max_batch=1, max_seq_len=2048))
    try:
        return asyncio.run(_answer(chat, messages, options))
    finally:
        chat.close()


async def _answer(chat: Chat, messages: list[dict[str, str]], options: ChatOptions) -> int:
    stream = chat.stream(messages, options)
    async for delta in stream:  # printed as it is made
        sys.stdout.write(delta)
        sys.stdout.flush()
    sys.stdout.write("\n")
    first = "-" if stream.first_token_at is None else f"{1000 * (stream.first_token_at - stream.started_at):.0f} ms"
    elapsed = time.perf_counter() - stream.started_at
    print(f"lyre: {stream.completion_tokens} tokens ({stream.finish_reason}), first token after {first}, "
          f"{stream.completion_tokens / elapsed:.1f} tokens/s", file=sys.stderr)
    return 0
