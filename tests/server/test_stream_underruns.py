"""The server hears the gaps its listeners hear: `lyre serve` processes on loopback, one whose listeners are taken
to play far faster than any device makes audio (every chunk after the first comes after they ran dry), one whose
listeners play five times slower (none ever runs dry)."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from websockets.asyncio.client import connect

from serving import Server, running_server

pytestmark = pytest.mark.slow

_SPEECH = {"input": "A reply to be heard as it comes.", "max_tokens": 168, "response_format": "pcm", "seed": 3}


def _samples(server: Server, name: str) -> dict[str, float]:
    """Every sample of ``name`` on /metrics, by its line's labels ({} when the server has none yet)."""
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line.startswith(name + "{")}


def _speak(server: Server) -> int:
    """Stream one request to its end; the chunks the client read."""
    with httpx.Client(timeout=120) as http, http.stream("POST", f"{server.url}/v1/audio/speech", json=_SPEECH) as r:
        assert r.status_code == 200, r.read()
        return sum(1 for chunk in r.iter_bytes() if chunk)


def _speak_ws(server: Server) -> int:
    """One context on the TTS WebSocket to its end; the chunks that came."""
    async def main() -> int:
        async with connect(server.ws_url + "/v1/tts/websocket") as ws:
            await ws.send(json.dumps({"context_id": "c", "voice": {"mode": "id", "id": "tara"}, "continue": False,
                                      "transcript": _SPEECH["input"], "max_tokens": _SPEECH["max_tokens"]}))
            chunks = 0
            while not (message := json.loads(await ws.recv()))["done"]:
                chunks += message["type"] == "chunk"
            return chunks
    return asyncio.run(main())


def test_a_starved_listener_is_counted_in_metrics_per_api_with_its_gaps() -> None:
    with running_server("--playback-rate", "50", "--max-seq-len", "512") as server:
        assert _speak(server) >= 2
        underruns = _samples(server, "lyre_stream_underruns_total")
        assert set(underruns) == {'lyre_stream_underruns_total{api="http"}'}
        counted = underruns['lyre_stream_underruns_total{api="http"}']
        assert counted >= 1
        gaps = _samples(server, "lyre_stream_underrun_seconds_count")
        assert gaps == {'lyre_stream_underrun_seconds_count{api="http"}': counted}  # one stall timed each
        assert _speak_ws(server) >= 2
        underruns = _samples(server, "lyre_stream_underruns_total")
        assert underruns['lyre_stream_underruns_total{api="http"}'] == counted  # the socket's counted apart
        assert underruns['lyre_stream_underruns_total{api="websocket"}'] >= 1


def test_a_listener_that_never_runs_dry_counts_no_underrun() -> None:
    with running_server("--playback-rate", "0.2", "--max-seq-len", "512") as server:
        assert _speak(server) >= 2 and _speak_ws(server) >= 2
        assert sum(_samples(server, "lyre_stream_underruns_total").values()) == 0
        assert "lyre_stream_underruns" in httpx.get(f"{server.url}/metrics", timeout=10).text  # exposed, at 0
