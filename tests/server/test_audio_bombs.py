"""Decode bombs against a real server: every route that takes an audio file stops decoding at the longest audio
it accepts, and refuses the file at once, naming its limit, without the server growing.

A bomb is a small file of long silence (an hour of FLAC in about 440 KB, of Opus in about 820 KB). Decoded
whole, an hour at 16 kHz is 230 MB of float32 before anything measures it.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator

import httpx
import pytest

from bombs import silence_bomb
from serving import Server, running_server

pytestmark = pytest.mark.slow

ADMIN = {"Authorization": "Bearer bomb-admin"}
MAX_SECONDS_TO_REFUSE = 2.0
MAX_GROWTH_MB = 100.0


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    with running_server("--stt", "--admin-key", "bomb-admin", "--max-streams", "2") as s:
        yield s


def _send(server: Server, route: str, bomb: bytes) -> httpx.Response:
    files = {"file": ("bomb.audio", bomb)}
    if route == "transcriptions":
        return httpx.post(server.url + "/v1/audio/transcriptions", files=files, data={"model": "whisper-1"},
                          timeout=60)
    if route == "alignments":
        return httpx.post(server.url + "/v1/audio/alignments", files=files, data={"text": "Hello."}, timeout=60)
    if route == "voices":
        return httpx.post(server.url + "/v1/audio/voices", files=files, data={"name": "bomb", "text": "Hello."},
                          headers=ADMIN, timeout=60)
    return httpx.post(server.url + "/v1/audio/speech", timeout=60,
                      json={"input": "Hi.", "reference_audio": base64.b64encode(bomb).decode(),
                            "reference_text": "Hello."})


@pytest.mark.parametrize("route, codec, container, param, limit", [
    ("transcriptions", "flac", "flac", "file", "600 s"),  # --stt-max-file-seconds's default
    ("alignments", "libopus", "ogg", "file", "30 s"),
    ("voices", "libopus", "ogg", "file", "25 s"),  # 15 s of speech and 10 s of silence around it
    ("speech", "flac", "flac", "reference_audio", "25 s"),
])
def test_an_hour_of_silence_is_refused_within_two_seconds_without_the_server_growing(
        server: Server, route: str, codec: str, container: str, param: str, limit: str) -> None:
    bomb = silence_bomb(codec, container, 3600)
    assert len(bomb) < 900_000  # base64 of it fits the speech route's 1 MiB body
    server.reset_peak_rss()
    before = server.rss_kb()
    start = time.monotonic()
    refused = _send(server, route, bomb)
    took = time.monotonic() - start
    grew_mb = (server.peak_rss_kb() - before) / 1024
    answered = f"answered {refused.status_code} after {took:.2f} s, the server {grew_mb:.0f} MB larger at its peak"
    assert took < MAX_SECONDS_TO_REFUSE and grew_mb < MAX_GROWTH_MB, answered
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == param and limit in error["message"], error
