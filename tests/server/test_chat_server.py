"""POST /v1/chat/completions on a real `lyre serve --no-tts --llm demo` process, through the openai SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from serving import Server, running_server

pytestmark = pytest.mark.slow

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
MODEL = "SmolLM2-135M-Instruct.Q4_1"  # the demo file's stem


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--no-tts", "--llm", "demo", "--llm-max-batch", "2", "--llm-max-seq-len", "512",
                        "--max-queue", "4") as s:
        yield s


@pytest.fixture(scope="module")
def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def _metric(server: Server, name: str, **labels: str) -> float:
    """One sample of /metrics by name and labels (0 when it has not been recorded yet)."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    head = f"{name}{{{want}}}" if labels else name
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(head + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_sdk_gets_an_answer_with_usage(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]
    reply = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=24)
    choice = reply.choices[0]
    assert "Paris" in (choice.message.content or "") and choice.message.role == "assistant"
    assert choice.finish_reason == "stop" and reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    usage = reply.usage
    assert usage is not None and usage.prompt_tokens > 20 and 0 < usage.completion_tokens < 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    short = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_completion_tokens=3)
    assert short.choices[0].finish_reason == "length" and short.usage is not None
    assert short.usage.completion_tokens == 3
    assert (reply.choices[0].message.content or "").startswith(short.choices[0].message.content or "-")


def test_streaming_sends_openai_chunks_then_usage_then_done(client: openai.OpenAI, server: Server) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=24)
    chunks = list(client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=24,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks[:-1]][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage == whole.usage
    assert len({c.id for c in chunks}) == 1 and all(c.object == "chat.completion.chunk" for c in chunks)

    with httpx.stream("POST", f"{server.url}/v1/chat/completions", timeout=60,
                      json={"messages": FRANCE, "temperature": 0, "max_tokens": 24, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0].removeprefix("data: "))
    assert set(first) == {"id", "object", "created", "model", "system_fingerprint", "choices"}  # no usage key
    assert first["choices"][0] == {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                   "finish_reason": None}


def test_stop_strings_are_cut_exactly_even_across_tokens(client: openai.OpenAI) -> None:
    # " of Fr" ends inside the token " France": the answer stops before it all the same.
    reply = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=24,
                                           stop=[" of Fr", "zzz"])
    assert reply.choices[0].message.content == "The capital" and reply.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(model=MODEL, messages=FRANCE, temperature=0, max_tokens=24,
                                              stop=" of Fr", stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == "The capital"


@pytest.mark.parametrize(("changes", "param"), [
    ({"n": 2}, "n"),
    ({"max_tokens": 5000}, "max_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages.0.role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
     "messages.0.content"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
])
def test_bad_requests_are_400s_naming_the_field(server: Server, changes: dict[str, object], param: str) -> None:
    r = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": FRANCE, **changes}, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param), error


def test_the_sdk_sees_a_too_long_request_as_a_bad_request(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="max_tokens") as refused:
        client.chat.completions.create(model=MODEL, messages=FRANCE, max_tokens=600)
    assert refused.value.param == "max_tokens"


# Greedy, the demo model writes all 400 tokens of this (about 30 s here) unless it is stopped.
LONG = {"messages": [{"role": "user", "content": "Write a long essay about the history of Rome."}],
        "temperature": 0, "max_tokens": 400}


def _await_slots_free(server: Server, completions_before: float) -> None:
    deadline = time.monotonic() + 10
    while _metric(server, "lyre_chat_engine_running") > 0:
        assert time.monotonic() < deadline, "the chat engine still holds the slot"
        time.sleep(0.1)
    # stopped long before the 400 tokens it was allowed: aborted, not run out
    assert _metric(server, "lyre_chat_tokens_total", kind="completion") - completions_before < 200


def test_a_client_that_disconnects_frees_its_slot(server: Server) -> None:
    before = _metric(server, "lyre_chat_tokens_total", kind="completion")
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json={**LONG, "stream": True}, timeout=60) as r:
        lines = r.iter_lines()
        for _ in range(6):  # the role chunk and a few tokens
            next(lines)
        assert _metric(server, "lyre_chat_engine_running") == 1
    _await_slots_free(server, before)
    assert _metric(server, "lyre_chat_requests_total", mode="stream", outcome="cancelled") >= 1

    before = _metric(server, "lyre_chat_tokens_total", kind="completion")
    with pytest.raises(httpx.ReadTimeout):  # the whole answer, given up on
        httpx.post(f"{server.url}/v1/chat/completions", json=LONG, timeout=2)
    _await_slots_free(server, before)
    assert _metric(server, "lyre_chat_requests_total", mode="json", outcome="cancelled") >= 1


def test_lyre_chat_prints_the_answer_as_it_comes() -> None:
    done = subprocess.run([sys.executable, "-m", "lyre.cli", "chat", "What is the capital of Japan?",
                           "--max-tokens", "24", "--system", "Answer in one sentence."],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Tokyo" in done.stdout and "tokens (stop)" in done.stderr


def test_a_conversation_turn_reuses_the_cached_blocks_of_the_turn_before(client: openai.OpenAI,
                                                                          server: Server) -> None:
    system = {"role": "system", "content": "You are a concise assistant for a voice agent. " * 12}
    messages = [system, *FRANCE]
    first = client.chat.completions.create(model=MODEL, messages=messages, temperature=0, max_tokens=8)
    hits = _metric(server, "lyre_chat_engine_prefix_cache_hits_total")
    answer = {"role": "assistant", "content": first.choices[0].message.content or ""}
    follow_up = [*messages, answer, {"role": "user", "content": "And of Spain?"}]
    second = client.chat.completions.create(model=MODEL, messages=follow_up, temperature=0, max_tokens=8)
    assert second.usage is not None and second.usage.prompt_tokens > 128
    # The system prompt and the first question (two blocks of 64, at least) were not prefilled again.
    assert _metric(server, "lyre_chat_engine_prefix_cache_hits_total") >= hits + 2
    health = httpx.get(f"{server.url}/health", timeout=10).json()["kv_cache"]["chat"]
    assert health["block_size"] == 64 and health["used"] == 0 and health["cached"] >= 2
    assert 0 < health["prefix_hit_rate"] <= 1
