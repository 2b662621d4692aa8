"""The text front end through a real server: HTTP (JSON, SSE), the TTS WebSocket, SSML, and turning it off.

The demo model speaks noise, so what is checked is what holds on any audio: the spoken text the model was
given, the written words word times come back on, the silence SSML's <break> puts in the audio (exact zeros),
and the errors bad SSML gets.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
from websockets.asyncio.client import connect

from lyre.orpheus import SAMPLE_RATE
from lyre.stt import written_words
from serving import Server, running_server

TOKENS = 70  # 10 frames per segment: short noise


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--max-streams", "2", "--max-queue", "4") as s:
        yield s


def _speech(server: Server, **body: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                      json={"voice": "tara", "max_tokens": TOKENS, "seed": 1, **body})


def _longest_zero_run(pcm: np.ndarray) -> int:
    zero = np.concatenate([[0], (pcm == 0).astype(np.int8), [0]])
    edges = np.flatnonzero(np.diff(zero))
    return int(np.max(edges[1::2] - edges[::2])) if edges.size else 0


def test_json_answer_carries_the_spoken_text_and_times_the_written_words(server: Server) -> None:
    text = "It costs $5.20 on 2026-12-02."
    response = _speech(server, input=text, response_format="wav", timestamps=True)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["spoken_text"] == "It costs five dollars and twenty cents on December second, twenty twenty six."
    words = answer["words"]
    # "$5.20" is one word, as written. The demo never says end-of-speech: its segment is cut on its budget, and
    # the words the aligner finds never spoken are left out, so the words told are the first of them.
    told = [w["text"] for w in words]
    assert told and told == written_words(text)[:len(told)]
    assert all(0 <= w["start"] < w["end"] <= answer["duration"] + 0.01 for w in words)
    assert server.metric("lyre_text_normalize_texts_total") >= 1
    assert server.metric("lyre_text_normalize_fallbacks_total") == 0


def test_normalize_false_speaks_the_text_as_written(server: Server) -> None:
    response = _speech(server, input="It costs $5.20.", response_format="wav", timestamps=True, normalize=False)
    assert response.status_code == 200, response.text
    assert response.json()["spoken_text"] == "It costs $5.20."


def test_sse_done_event_carries_the_spoken_text(server: Server) -> None:
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120,
                      json={"input": "Call 555-0100.", "voice": "tara", "response_format": "pcm",
                            "stream_format": "sse", "timestamps": True, "max_tokens": TOKENS}) as response:
        assert response.status_code == 200, response.read()
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1]["type"] == "speech.audio.done"
    assert events[-1]["spoken_text"] == "Call five five five, oh one oh oh."


def test_an_ssml_break_puts_real_silence_in_the_audio(server: Server) -> None:
    ssml = '<speak><s>Hello there.</s><break time="1500ms"/><s>Goodbye now.</s></speak>'
    with_break = _speech(server, input=ssml, response_format="pcm")
    plain = _speech(server, input="Hello there. Goodbye now.", response_format="pcm")
    assert with_break.status_code == plain.status_code == 200, with_break.text
    silence = _longest_zero_run(np.frombuffer(with_break.content, "<i2"))
    assert 1.5 * SAMPLE_RATE <= silence < 1.5 * SAMPLE_RATE + 0.2 * SAMPLE_RATE, silence / SAMPLE_RATE
    assert _longest_zero_run(np.frombuffer(plain.content, "<i2")) < 0.5 * SAMPLE_RATE


def test_ssml_say_as_and_sub_are_said_and_unknown_markup_is_warned_of(server: Server) -> None:
    ssml = ('<speak>Dial <say-as interpret-as="telephone">415-555-0100</say-as> for '
            '<sub alias="World Wide Web Consortium">W3C</sub>, <prosody rate="slow">slowly</prosody> '
            '<say-as interpret-as="characters">abc</say-as> <laugh/> now.</speak>')
    response = _speech(server, input=ssml, response_format="wav", timestamps=True)
    assert response.status_code == 200, response.text
    assert "prosody" in response.headers["x-lyre-ssml-warnings"]
    answer = response.json()
    assert answer["spoken_text"] == ("Dial four one five, five five five, oh one oh oh for World Wide Web "
                                     "Consortium, slowly A B C <laugh> now.")
    written = iter(["Dial", "415-555-0100", "for", "W3C,", "slowly", "abc", "now."])  # those said, in order
    assert answer["words"] and all(w["text"] in written for w in answer["words"]), answer["words"]


@pytest.mark.parametrize(("ssml", "problem"), [
    ("<speak>Hello <break time='500ms'></speak>", "malformed: mismatched tag"),
    ("<speak>Hi <break time='forever'/></speak>", "<break time='forever'>"),
    ("<speak>Hi <break time='60s'/></speak>", "at most 10 s"),
    ("<speak><sub>W3C</sub></speak>", "<sub> needs an alias"),
    ("<speak><say-as>5</say-as></speak>", "needs an interpret-as"),
    ('<!DOCTYPE x [<!ENTITY a "b">]><speak>&a;</speak>', "DOCTYPE"),
])
def test_malformed_ssml_is_a_400_naming_the_problem(server: Server, ssml: str, problem: str) -> None:
    response = _speech(server, input=ssml, ssml=True)
    assert response.status_code == 400, response.text
    assert problem in response.json()["error"]["message"]


def test_the_websocket_never_cuts_an_amount_that_arrives_in_pieces(server: Server) -> None:
    """"It costs $", "3", ".50" with pauses longer than the server's flush (0.8 s) between them: one word."""
    async def talk() -> list[dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            for i, piece in enumerate(["It costs $", "3", ".50", " today."]):
                await ws.send(json.dumps({"context_id": "c1", "voice": {"mode": "id", "id": "tara"},
                                          "transcript": piece, "continue": i < 3, "add_timestamps": True,
                                          "max_tokens": TOKENS}))
                await asyncio.sleep(1.2)
            messages = []
            while not (messages and messages[-1]["done"]):
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            return messages

    messages = asyncio.run(talk())
    assert messages[-1]["type"] == "done", messages[-1]
    words = [w for m in messages if m["type"] == "timestamps" for w in m["word_timestamps"]["words"]]
    assert words == ["It", "costs", "$3.50", "today."]


def test_the_websocket_reads_ssml_whole_at_the_context_end(server: Server) -> None:
    async def talk(first: dict[str, Any]) -> list[dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket") as ws:
            await ws.send(json.dumps({"context_id": "s1", "voice": {"mode": "id", "id": "tara"}, "continue": True,
                                      "max_tokens": TOKENS, **first}))
            await ws.send(json.dumps({"context_id": "s1", "transcript": '<break time="1s"/>Bye.</speak>',
                                      "continue": False}))
            messages = []
            while not (messages and messages[-1]["done"]):
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            return messages

    good = asyncio.run(talk({"transcript": "<speak>Hi."}))
    assert good[-1]["type"] == "done", good[-1]
    pcm = np.concatenate([np.frombuffer(base64.b64decode(m["data"]), "<i2") for m in good if m["type"] == "chunk"])
    assert _longest_zero_run(pcm) >= SAMPLE_RATE
    bad = asyncio.run(talk({"transcript": "<speak><sub>Hi</sub>"}))
    assert bad[-1]["type"] == "error" and "<sub> needs an alias" in bad[-1]["error"]


def test_no_normalize_turns_reading_off_for_the_whole_server() -> None:
    with running_server("--max-streams", "1", "--no-normalize") as server:
        response = _speech(server, input="It costs $5.20.", response_format="wav", timestamps=True)
        assert response.status_code == 200, response.text
        assert response.json()["spoken_text"] == "It costs $5.20."


def test_refused_text_leaves_nothing_that_counts_against_the_next_stream(server: Server) -> None:
    """Malformed SSML (HTTP 400) and a context whose first text is over the limit (refused before its task
    ran) each opened a stream whose listener admission counts: they must leave with the refusal. Eight of them
    left behind would make a lone next stream look like nine and be refused at these rates."""
    for _ in range(4):
        assert _speech(server, input="<speak><sub>Hi</sub></speak>").status_code == 400

    async def talk() -> list[dict[str, Any]]:
        async with connect(f"{server.ws_url}/v1/tts/websocket", max_size=None) as ws:
            for i in range(4):
                await ws.send(json.dumps({"context_id": f"big{i}", "voice": {"mode": "id", "id": "tara"},
                                          "transcript": "x" * 5000, "continue": True}))
                refused = json.loads(await asyncio.wait_for(ws.recv(), 60))
                assert refused["type"] == "error" and "over the limit" in refused["error"], refused
            await ws.send(json.dumps({"context_id": "ok", "voice": {"mode": "id", "id": "tara"},
                                      "transcript": "Hello there.", "max_tokens": TOKENS}))
            messages = []
            while not (messages and messages[-1]["done"]):
                messages.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
            return messages

    messages = asyncio.run(talk())
    assert messages[-1]["type"] == "done", messages[-1]
    assert _speech(server, input="Hello again.", priority="realtime").status_code == 200
