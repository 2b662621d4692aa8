"""A segment cut on its token budget is never silent, on every transport: a real server on the demo model (whose
segments run to their budgets), real HTTP and WebSocket clients. The agent's replies: tests/agent/test_agent.py."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect

from lyre.orpheus import SAMPLE_RATE
from lyre.stt import written_words
from serving import Server, running_server

CAP = 14  # max_tokens: two frames a segment, so the demo always runs out
# Over one segment's 187 characters (the default 2,048 positions): two segments, each cut.
TEXT = ("When you arrive at the station, take the north exit past the flower stall and cross the avenue at the "
        "second set of lights. Walk along the canal for five minutes until you reach the old brick bridge, then "
        "turn left.")


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--max-streams", "4") as running:
        # The server's own warm-up runs to its few tokens on purpose: neither counted nor logged as a cut.
        assert _cuts_metric(running) == {"budget": 0, "max_tokens": 0}
        assert "before end-of-speech" not in running.output()
        yield running


def _cuts_metric(server: Server) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {m[1]: float(m[2]) for m in re.finditer(r'^lyre_segments_cut_total\{reason="(\w+)"\} (\S+)$', text, re.M)}


def _sse(server: Server, body: dict[str, Any]) -> list[dict[str, Any]]:
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json={"voice": "tara", "response_format": "pcm",
                      "stream_format": "sse", **body}, timeout=120) as response:
        assert response.status_code == 200
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def _check(cuts: list[dict[str, Any]], reason: str, tokens: int | None) -> None:
    assert cuts and [c["segment"] for c in cuts] == sorted({c["segment"] for c in cuts})
    for cut in cuts:
        assert cut["reason"] == reason and cut["text"] and cut["text"] in TEXT + " Hi there."
        assert tokens is None or cut["max_tokens"] == tokens


def test_sse_tells_each_cut_segment_before_the_audio_is_done(server: Server) -> None:
    before = _cuts_metric(server)
    events = _sse(server, {"input": TEXT, "max_tokens": CAP, "seed": 1})
    kinds = [e["type"] for e in events]
    cuts = [e for e in events if e["type"] == "speech.segment_cut"]
    _check(cuts, "max_tokens", CAP)
    assert {c["segment"] for c in cuts} <= {0, 1} and kinds[-1] == "speech.audio.done"
    assert _cuts_metric(server)["max_tokens"] - before.get("max_tokens", 0) == len(cuts)


def test_without_max_tokens_a_segment_runs_to_its_words_budget_and_the_cut_says_so(server: Server) -> None:
    # Three seeds: the demo's random weights may yet say end-of-speech within 24 frames (rarely), and that
    # request is then not cut; the others are.
    cuts = [e for seed in (2, 3, 4) for e in _sse(server, {"input": "Hi there.", "seed": seed})
            if e["type"] == "speech.segment_cut"]
    assert cuts and all(c["reason"] == "budget" and c["text"] == "Hi there." for c in cuts)
    assert {c["max_tokens"] for c in cuts} == {168}  # a 1 s lead-in and 9 characters at 9 a second: 2 s, 24 frames
    assert _cuts_metric(server)["budget"] >= 1


def test_the_json_answer_lists_the_cut_segments(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/audio/speech", json={
        "input": TEXT, "voice": "tara", "response_format": "wav", "timestamps": True, "max_tokens": CAP,
        "seed": 3}, timeout=120)
    assert response.status_code == 200
    _check(response.json()["cut_segments"], "max_tokens", CAP)


def test_plain_audio_is_counted_and_the_websocket_context_s_done_names_them(server: Server) -> None:
    before = _cuts_metric(server).get("max_tokens", 0)
    plain = httpx.post(f"{server.url}/v1/audio/speech", json={"input": TEXT, "voice": "tara", "max_tokens": CAP,
                                                               "response_format": "pcm", "seed": 4}, timeout=120)
    assert plain.status_code == 200 and plain.content

    async def talk() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            await ws.send(json.dumps({"context_id": "c1", "voice": {"mode": "id", "id": "tara"}, "transcript": TEXT,
                                      "continue": False, "max_tokens": CAP, "seed": 5}))
            messages = []
            while not (message := json.loads(await asyncio.wait_for(ws.recv(), 120)))["done"]:
                messages.append(message)
            return messages, message

    messages, done = asyncio.run(talk())
    # On the context's done (a message of a type of its own would be an error to Cartesia's clients).
    assert {m["type"] for m in messages} == {"chunk"} and done["type"] == "done" and done["context_id"] == "c1"
    cuts = done["cut_segments"]
    _check(cuts, "max_tokens", CAP)
    # The plain answer has no place for them, so they are counted (and logged) only.
    assert _cuts_metric(server)["max_tokens"] - before >= 1 + len(cuts)
    assert "before end-of-speech" in server.output()


# -- word times of cut segments ----------------------------------------------------------------------------
# The demo speaks noise, so which words a cut segment "says" is the aligner's guess; what holds on any audio is
# checked: the words told are written words in order (those a cut segment never said left out), each inside
# the audio as made, a frame long at least, none overlapping.


def _check_words(words: list[str], starts: list[float], ends: list[float], text: str, duration_s: float) -> None:
    written = iter(written_words(text))
    assert all(word in written for word in words), (words, text)  # in order, each once
    assert all(e - s >= 0.01 - 1e-9 for s, e in zip(starts, ends)), (starts, ends)
    assert all(e <= s for e, s in zip(ends, starts[1:])), (starts, ends)
    assert not ends or (0 <= starts[0] and ends[-1] <= duration_s + 1e-3), (starts, ends, duration_s)


@pytest.mark.parametrize("tokens", [CAP, 105])
def test_word_times_of_cut_segments_stay_inside_their_audio_and_in_order(server: Server, tokens: int) -> None:
    """14 tokens: 0.17 s for each segment's 24 and 17 words, which were given 10 ms each and ran past the audio and
    over the next segment's words (issue 58)."""
    events = _sse(server, {"input": TEXT, "max_tokens": tokens, "seed": 1, "timestamps": True})
    samples = sum(len(base64.b64decode(e["audio"])) // 2 for e in events if e["type"] == "speech.audio.delta")
    stamps = [e["word_timestamps"] for e in events if e["type"] == "speech.word_timestamps"]
    _check_words([w for s in stamps for w in s["words"]], [t for s in stamps for t in s["start"]],
                 [t for s in stamps for t in s["end"]], TEXT, samples / SAMPLE_RATE)
    answer = httpx.post(f"{server.url}/v1/audio/speech", json={
        "input": TEXT, "voice": "tara", "response_format": "pcm", "timestamps": True, "max_tokens": tokens,
        "seed": 2}, timeout=120).json()
    _check_words(*([w[key] for w in answer["words"]] for key in ("text", "start", "end")), TEXT, answer["duration"])
    assert len(answer["cut_segments"]) == 2


def test_a_word_longer_than_a_segment_is_timed_as_one_word(server: Server) -> None:
    """404 letters and no space: cut inside the word into three segments, whose pieces came back as three words."""
    word = "a" * 404
    answer = httpx.post(f"{server.url}/v1/audio/speech", json={
        "input": word, "voice": "tara", "response_format": "pcm", "timestamps": True, "max_tokens": 280,
        "seed": 1}, timeout=300).json()
    assert len(answer["cut_segments"]) == 3
    assert [w["text"] for w in answer["words"]] == [word]
    _check_words(*([w[key] for w in answer["words"]] for key in ("text", "start", "end")), word, answer["duration"])
