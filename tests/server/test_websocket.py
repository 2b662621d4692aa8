"""The streaming WebSocket over real loopback: a uvicorn server on the demo model, the websockets client."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from lyre.cli.serve import SEND_BUFFER_BYTES
from lyre.models.demo import DemoPaths
from lyre.orpheus import FRAME_TOKENS, SAMPLES_PER_FRAME
from lyre.server.admission import Admission
from lyre.server.aligner import ALIGNER_OFF, Aligner
from lyre.server.sockets import ws_messages as msg
from lyre.server.config import ServerConfig
from lyre.server.metrics import Metrics
from lyre.server.state import ServerState
from lyre.server.sockets.tts_socket import WEBSOCKET_PATH, router
from lyre.tts import TTS, ServingConfig, TTSConfig
from polling import eventually
from serving import serving_in_thread
from stalled_reader import StalledReader

FLUSH_AFTER_S = 0.5
SHORT = 28  # max_tokens: 4 frames, well under a second of work
LONG = 700  # runs for many seconds: long enough to cancel or hang up mid-speech

def _uncut(done: dict[str, Any]) -> dict[str, Any]:
    """A context's done without the segments it names as cut (the demo model runs each to its max_tokens)."""
    return {k: v for k, v in done.items() if k != "cut_segments"}


class _Server:
    def __init__(self, state: ServerState, port: int) -> None:
        self.state = state
        self.url = f"ws://127.0.0.1:{port}{WEBSOCKET_PATH}"


@pytest.fixture(scope="module")
def server(demo: DemoPaths) -> Iterator[_Server]:
    tts = TTS.load(demo.model, demo.codec, ServingConfig(max_streams=4, max_seq_len=1024),
                   TTSConfig(max_input_chars=400, flush_after_s=FLUSH_AFTER_S, admit_on_rates=False))
    # admit_on_rates off: contexts interleave here; admission by the rates is tested in test_server_scheduling
    config = ServerConfig(ws_max_contexts=3, ws_max_message_bytes=2048, ws_flush_after_s=FLUSH_AFTER_S,
                          max_input_chars=400)
    state = ServerState(config=config, tts=tts, admission=Admission(4, 8, 10.0),
                        metrics=Metrics(tts.engine.stats, tts.codec.stats), ready=True)
    app = FastAPI()
    app.state.lyre = state
    app.include_router(router)
    with serving_in_thread(app, SEND_BUFFER_BYTES) as port:
        yield _Server(state, port)
    tts.close()


@contextmanager
def configured(server: _Server, **changes: Any) -> Iterator[None]:
    """Run with some server settings changed (the socket reads them as it goes)."""
    saved = server.state.config
    server.state.config = replace(saved, **changes)
    try:
        yield
    finally:
        server.state.config = saved


def _msg(context_id: str, transcript: str, more: bool, **extra: Any) -> str:
    message = {
        "context_id": context_id, "model_id": "orpheus", "voice": {"mode": "id", "id": "tara"},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
        "transcript": transcript, "continue": more, **extra,
    }
    return json.dumps(message)


async def _recv(ws: ClientConnection, timeout: float = 30.0) -> dict[str, Any]:
    return json.loads(await asyncio.wait_for(ws.recv(), timeout))


async def _until_done(ws: ClientConnection, *context_ids: str) -> dict[str, list[dict[str, Any]]]:
    """Every message until each of ``context_ids`` has said done (or failed), by context."""
    seen: dict[str, list[dict[str, Any]]] = {c: [] for c in context_ids}
    waiting = set(context_ids)
    while waiting:
        message = await _recv(ws)
        seen.setdefault(message["context_id"], []).append(message)
        if message["done"]:
            waiting.discard(message["context_id"])
    return seen


def _audio(messages: list[dict[str, Any]]) -> np.ndarray:
    """The context's PCM, after checking it is chunks and then one done (which names the segments cut: the
    demo model runs each to its max_tokens)."""
    assert [m["type"] for m in messages[:-1]] == ["chunk"] * (len(messages) - 1)
    done = dict(messages[-1])
    cuts = done.pop("cut_segments", [])
    assert done == {"type": "done", "context_id": done["context_id"], "done": True}
    assert all(c["reason"] in ("budget", "max_tokens") and c["text"] for c in cuts), cuts
    pcm = b"".join(base64.b64decode(m["data"]) for m in messages[:-1])
    return np.frombuffer(pcm, dtype="<i2")


async def _engine_idle(server: _Server, timeout: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.state.tts.engine.stats().running == 0 and server.state.admission.active == 0:
            return True
        await asyncio.sleep(0.05)
    return False


def _metric(server: _Server, name: str, **labels: str) -> float:
    return server.state.metrics.registry.get_sample_value(name, labels) or 0.0


def test_text_in_two_pieces_is_spoken_then_done(server: _Server) -> None:
    async def main() -> dict[str, list[dict[str, Any]]]:
        async with connect(server.url) as ws:
            await ws.send(_msg("c1", "Hello, ", True, max_tokens=SHORT, seed=1, trim=False))
            await ws.send(_msg("c1", "how are you?", False))
            return await _until_done(ws, "c1")

    ok_before = _metric(server, "lyre_requests_total", api="websocket", outcome="ok")
    seen = asyncio.run(main())
    pcm = _audio(seen["c1"])
    assert len(pcm) > 0 and len(pcm) % SAMPLES_PER_FRAME == 0  # untrimmed: whole frames
    assert len(pcm) == SHORT // FRAME_TOKENS * SAMPLES_PER_FRAME  # one segment: the pieces were joined first
    assert _metric(server, "lyre_requests_total", api="websocket", outcome="ok") == ok_before + 1
    assert _metric(server, "lyre_time_to_first_audio_seconds_count", api="websocket") >= 1
    assert _metric(server, "lyre_audio_seconds_total", api="websocket") > 0


def test_with_word_times_off_a_context_asking_for_them_still_speaks(server: _Server) -> None:
    """``--aligner off``: Pipecat's Cartesia service always sends add_timestamps; it gets its audio and done."""
    async def main() -> dict[str, list[dict[str, Any]]]:
        async with connect(server.url) as ws:
            await ws.send(_msg("c1", "Hello there.", False, max_tokens=SHORT, seed=1, add_timestamps=True))
            return await _until_done(ws, "c1")

    server.state.aligner = Aligner(ALIGNER_OFF, None, "cpu")
    try:
        seen = asyncio.run(main())
    finally:
        server.state.aligner = None
    assert len(_audio(seen["c1"])) > 0  # chunks then done, and no timestamps message


def test_an_openai_voice_name_is_accepted_and_keeps_the_voice_it_stands_for(server: _Server) -> None:
    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        async with connect(server.url) as ws:
            await ws.send(_msg("c1", "Hi.", True, voice={"mode": "id", "id": "nova"}, max_tokens=SHORT, seed=1))
            # "nova" stands for one voice; naming that voice later is the same voice, another is refused.
            await ws.send(_msg("c1", " There.", False, voice={"mode": "id", "id": server.state.tts.voices.resolve("nova")}))
            first = await _until_done(ws, "c1")
            await ws.send(_msg("c2", "Hi.", True, voice={"mode": "id", "id": "nova"}))
            await ws.send(_msg("c2", " There.", False, voice={"mode": "id", "id": "onyx"}))
            return first["c1"], (await _until_done(ws, "c2"))["c2"]

    spoken, refused = asyncio.run(main())
    assert len(_audio(spoken)) > 0
    assert refused[-1]["type"] == "error" and "keeps the voice" in refused[-1]["error"]


def test_interleaved_contexts_on_one_socket_each_finish_with_their_own_id(server: _Server) -> None:
    async def main() -> dict[str, list[dict[str, Any]]]:
        async with connect(server.url) as ws:
            await ws.send(_msg("a", "Good ", True, max_tokens=SHORT, seed=2))
            await ws.send(_msg("b", "See you ", True, max_tokens=SHORT, seed=3))
            await ws.send(_msg("a", "morning.", False))
            await ws.send(_msg("b", "later.", False))
            return await _until_done(ws, "a", "b")

    seen = asyncio.run(main())
    assert set(seen) == {"a", "b"}
    for messages in seen.values():
        assert len(_audio(messages)) > 0


def test_cancel_stops_one_context_and_frees_the_engine_while_another_finishes(server: _Server) -> None:
    async def main() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        received: list[dict[str, Any]] = []

        async def until(context_id: str, done: bool = False) -> None:
            while not any(m["context_id"] == context_id and (m["done"] or not done) for m in received):
                received.append(await _recv(ws))

        async with connect(server.url) as ws:
            await ws.send(_msg("long", "This is going to take a while.", False, max_tokens=LONG, seed=4))
            await ws.send(_msg("short", "Short and sweet.", False, max_tokens=SHORT * 2, seed=5))
            await until("long")
            await ws.send(json.dumps({"context_id": "long", "cancel": True}))
            # The server reads messages in order, so anything for "long" after the reply
            # to this probe was sent after the cancel.
            await ws.send(_msg("probe", "Hi.", False, voice={"mode": "id", "id": "nobody"}))
            await until("probe")
            before_probe = received.index(next(m for m in received if m["context_id"] == "probe"))
            await until("short", done=True)
            # Nothing more arrives for the cancelled context, even given time.
            with pytest.raises(TimeoutError):
                await _recv(ws, timeout=0.5)
        return received[before_probe:], [m for m in received if m["context_id"] == "short"]

    cancelled_before = _metric(server, "lyre_requests_total", api="websocket", outcome="cancelled")
    after_probe, short = asyncio.run(main())
    assert after_probe[0]["type"] == "error"
    assert all(m["context_id"] != "long" for m in after_probe)
    assert len(_audio(short)) > 0
    assert asyncio.run(_engine_idle(server))
    assert _metric(server, "lyre_requests_total", api="websocket", outcome="cancelled") == cancelled_before + 1


def test_bad_messages_get_errors_naming_the_problem_and_the_socket_keeps_working(server: _Server) -> None:
    async def main() -> list[dict[str, Any]]:
        replies = []
        async with connect(server.url) as ws:
            bad = [
                "{not json",
                json.dumps(["a list"]),
                json.dumps({"transcript": "no id"}),
                b"\x00\x01",
                _msg("v", "Hi.", False, voice={"mode": "id", "id": "nobody"}),
                _msg("e", "Hi.", False, output_format={"container": "raw", "encoding": "pcm_f32le",
                                                       "sample_rate": 24000}),
                _msg("r", "Hi.", False, output_format={"container": "raw", "encoding": "pcm_s16le",
                                                       "sample_rate": 16000}),
                _msg("t", "Hi.", False, temperature=-1),
                _msg("m", "Hi.", False, max_tokens="lots"),
                _msg("big", "x" * 3000, False),
                _msg("long", "y" * 401, False),
                _msg("more", "Hi.", "yes"),
                _msg("over", "Hi.", False, max_tokens=1000),  # over the 768 a 1024-position slot leaves
            ]
            for message in bad:
                await ws.send(message)
                replies.append(await _recv(ws))
            # A context that has ended takes no more text.
            await ws.send(_msg("ended", "", False))
            replies.append(await _recv(ws))
            await ws.send(_msg("ended", "More.", True))
            replies.append(await _recv(ws))
            # A context keeps its first voice.
            await ws.send(_msg("switch", "", True))
            await ws.send(_msg("switch", "Hi.", False, voice={"mode": "id", "id": "leo"}))
            replies.append(await _recv(ws))
            # More open contexts than the limit (3): the fourth is refused.
            for context_id in ("o1", "o2", "o3", "o4"):
                await ws.send(_msg(context_id, "", True))
            replies.append(await _recv(ws))
            for context_id in ("o1", "o2", "o3"):
                await ws.send(json.dumps({"context_id": context_id, "cancel": True}))
            # After all that, speech still works on this socket.
            await ws.send(_msg("fine", "All good.", False, max_tokens=SHORT, seed=6))
            replies.append((await _until_done(ws, "fine"))["fine"])
        return replies

    replies = asyncio.run(main())
    *errors, ended_done, ended_again, switched, too_many, fine = replies
    expected = [
        (None, "invalid JSON"), (None, "context_id"), (None, "context_id"), (None, "binary"),
        ("v", "unknown voice 'nobody'.*tara"), ("e", "encoding 'pcm_f32le'.*pcm_s16le"),
        ("r", "sample_rate 16000.*24000"), ("t", "temperature"), ("m", "max_tokens must be an integer"),
        (None, "bytes, over the limit of 2048"), ("long", "401 characters, over the limit of 400"),
        ("more", "continue must be true or false"), ("over", "max_tokens: 1000 is over this server's limit of 768"),
    ]
    assert len(errors) == len(expected)
    for reply, (context_id, pattern) in zip(errors, expected, strict=True):
        assert reply["type"] == "error" and reply["done"] is True and reply["context_id"] == context_id
        assert re.search(pattern, reply["error"]), reply
    assert _uncut(ended_done) == {"type": "done", "context_id": "ended", "done": True}
    assert ended_again["type"] == "error" and "already ended" in ended_again["error"]
    assert switched["context_id"] == "switch" and "keeps the voice" in switched["error"]
    assert too_many["context_id"] == "o4" and "too many open contexts" in too_many["error"]
    assert len(_audio(fine)) > 0


def test_pending_text_without_a_sentence_end_is_spoken_after_a_pause(server: _Server) -> None:
    async def main() -> tuple[float, list[dict[str, Any]]]:
        async with connect(server.url) as ws:
            sent = time.monotonic()
            await ws.send(_msg("p", "Well, let me think", True, max_tokens=SHORT, seed=7))
            first = await _recv(ws, timeout=FLUSH_AFTER_S + 5)  # spoken without more text
            waited = time.monotonic() - sent
            assert first["type"] == "chunk" and first["context_id"] == "p"
            await ws.send(_msg("p", "", False))
            rest = (await _until_done(ws, "p"))["p"]
            return waited, [first, *rest]

    waited, messages = asyncio.run(main())
    assert waited >= FLUSH_AFTER_S
    assert len(_audio(messages)) > 0


def test_idle_context_is_closed_with_an_error(server: _Server) -> None:
    async def main() -> dict[str, Any]:
        async with connect(server.url) as ws:
            await ws.send(_msg("quiet", "", True))
            return await _recv(ws, timeout=5)

    with configured(server, ws_idle_timeout_s=0.3):
        reply = asyncio.run(main())
    assert reply == {"type": "error", "context_id": "quiet", "error": "context idle for 0.3 s", "done": True}


def test_no_new_contexts_while_draining(server: _Server) -> None:
    async def main() -> dict[str, Any]:
        async with connect(server.url) as ws:
            await ws.send(_msg("late", "Hi.", False))
            return await _recv(ws)

    server.state.draining = True
    try:
        reply = asyncio.run(main())
    finally:
        server.state.draining = False
    assert reply["type"] == "error" and "shutting down" in reply["error"]


def test_hanging_up_mid_speech_frees_the_engine(server: _Server) -> None:
    async def main() -> bool:
        async with connect(server.url) as ws:
            await ws.send(_msg("gone", "Nobody will hear the end of this.", False, max_tokens=LONG, seed=8))
            assert (await _recv(ws))["type"] == "chunk"
            assert server.state.tts.engine.stats().running == 1
        return await _engine_idle(server)

    assert asyncio.run(main())


def test_a_listener_that_stops_reading_is_cut_and_its_contexts_freed(server: _Server) -> None:
    """A player that takes nothing more (a paused tab, a crashed reader whose socket stays open): once a send has
    waited the write timeout the socket is cut, closed with 1008 naming the stall, its contexts' slots and
    engine requests freed, and counted."""
    before = _metric(server, "lyre_stalled_listeners_total", api="websocket")
    with configured(server, write_timeout_s=1.0):
        reader = StalledReader(server.url)
        try:
            for context in ("a", "b"):  # two long contexts: far more chunks than the buffers on the way hold
                reader.send(_msg(context, "Nobody hears the end of this.", False, max_tokens=LONG, seed=9))
            assert eventually(lambda: server.state.admission.active == 2, timeout=30)
            assert eventually(lambda: _metric(server, "lyre_stalled_listeners_total", api="websocket") == before + 1,
                              timeout=60)
            code, reason = reader.to_the_end()  # the connection ends once what was on its way is read
        finally:
            reader.close()
    assert eventually(lambda: server.state.admission.active == 0, timeout=10)
    # The engine frees an aborted request on its own thread, after the slot: not necessarily by now.
    assert eventually(lambda: server.state.tts.engine.stats().running == 0, timeout=10)
    # The close frame waits behind what the reader never took, for the write timeout; it may have given up.
    assert (code, reason) in ((1008, "the listener took nothing for 1 s"), (None, "")), (code, reason)
    assert _metric(server, "lyre_stalled_listeners_total", api="websocket") == before + 1


def test_api_key_is_required_when_configured(server: _Server) -> None:
    async def speaks(url: str, headers: dict[str, str] | None = None) -> bool:
        async with connect(url, additional_headers=headers) as ws:
            await ws.send(_msg("k", "", False))
            return (await _recv(ws))["type"] == "done"

    async def refused(url: str, headers: dict[str, str] | None = None) -> int:
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, additional_headers=headers):
                pass
        return info.value.response.status_code

    async def main() -> None:
        assert await refused(server.url) == 403
        assert await refused(server.url + "?api_key=wrong") == 403
        assert await refused(server.url, {"Authorization": "Bearer wrong"}) == 403
        assert await speaks(server.url + "?api_key=sesame")
        assert await speaks(server.url, {"Authorization": "Bearer sesame"})
        assert await speaks(server.url, {"X-API-Key": "sesame"})

    with configured(server, api_key="sesame"):
        asyncio.run(main())



def test_a_context_the_server_has_no_room_for_gets_an_error_and_the_socket_stays_open(server: _Server) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any]]:
        async with connect(server.url) as ws:
            await ws.send(_msg("first", "This holds the only stream.", False, max_tokens=LONG, seed=9))
            assert (await _recv(ws))["context_id"] == "first"
            await ws.send(_msg("second", "No room for me.", False, max_tokens=SHORT))
            while (refused := await _recv(ws))["context_id"] != "second":
                pass
            await ws.send(json.dumps({"context_id": "first", "cancel": True}))
            await ws.send(_msg("third", "", False))  # nothing to say: done at once
            while (reply := await _recv(ws))["context_id"] != "third":
                pass
            return refused, reply

    saved = server.state.admission
    server.state.admission = Admission(1, 0, 1.0)  # one stream, no queue
    try:
        refused, reply = asyncio.run(main())
        assert asyncio.run(_engine_idle(server))
    finally:
        server.state.admission = saved
    assert refused["type"] == "error" and "capacity" in refused["error"]
    assert _uncut(reply) == {"type": "done", "context_id": "third", "done": True}


def test_without_max_tokens_a_context_gets_the_default_capped_to_the_server(server: _Server) -> None:
    # As for HTTP: the default 1200 would not fit a slot of 1024 positions; the pipeline caps it at 768.
    tts = server.state.tts
    message = {"context_id": "d", "transcript": "Hi."}
    settings = msg.settings(message, tts)
    assert settings.options.max_tokens is None and settings.voice == tts.voices.default
    assert tts.open(settings.voice, settings.options).sampling.max_tokens == 763  # 768 in whole frames
    settings = msg.settings({**message, "max_tokens": 70}, tts)
    assert tts.open(settings.voice, settings.options).sampling.max_tokens == 70
