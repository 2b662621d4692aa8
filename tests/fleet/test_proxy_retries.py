"""What HAProxy and nginx, with deploy/'s configurations as shipped, do with a busy server's answer, against real
proxies on loopback in front of two stand-in servers (tests/fleet/upstream_stub.py, which refuse a request with
the status it names): a 503 (draining) goes to the next server; a 429 (at capacity) reaches the client with its
Retry-After, and the busy server stays in use (``lyre route`` passes a 429 over: tests/fleet/test_router_proxy.py).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from fleet_processes import Process, Redis, close_all, wait_ready
from proxy_processes import PROXIES, Proxy, binary, start_proxy
from serving import _free_port

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    any(binary(kind) is None for kind in PROXIES),
    reason="haproxy or nginx is not installed (scripts/test.sh installs both: apt-get install haproxy nginx)")]

STUB = Path(__file__).with_name("upstream_stub.py")


@pytest.fixture(scope="module")
def proxies() -> Iterator[dict[str, Proxy]]:
    redis = Redis().start()
    stubs = []
    for _ in range(2):
        port = _free_port()
        cmd = [sys.executable, str(STUB), "--port", str(port), "--redis", redis.url]
        stubs.append(Process(cmd, f"http://127.0.0.1:{port}").start())
    folder = tempfile.TemporaryDirectory()
    started: dict[str, Proxy] = {}
    try:
        wait_ready(stubs)
        for kind in PROXIES:
            started[kind] = start_proxy(kind, [s.url for s in stubs], Path(folder.name, kind))
        wait_ready([p.process for p in started.values()])
        yield started
    finally:
        close_all([p.process for p in started.values()] + stubs)
        folder.cleanup()
        redis.stop()


def _speech(proxy: Proxy, session: str, refuse: str = "", status: int = 429) -> httpx.Response:
    params = {"refuse": refuse, "status": str(status)} if refuse else {}
    return httpx.post(proxy.url + "/v1/audio/speech", json={"voice": "tara"}, params=params,
                      headers={"x-lyre-session": session}, timeout=10)


def _home(proxy: Proxy, session: str) -> str:
    """The server the session's requests go to, once HAProxy's health checks have let both in."""
    homes = {proxy.server_of(_speech(proxy, session).headers) for _ in range(3)}
    assert len(homes) == 1, homes
    return homes.pop()


@pytest.mark.parametrize("kind", PROXIES)
def test_a_draining_server_s_503_goes_to_the_next_server(proxies: dict[str, Proxy], kind: str) -> None:
    proxy = proxies[kind]
    home = _home(proxy, "drain")
    moved = _speech(proxy, "drain", refuse=home, status=503)
    assert moved.status_code == 200, moved.text
    assert proxy.server_of(moved.headers) != home


@pytest.mark.parametrize("kind", PROXIES)
def test_a_busy_server_s_429_reaches_the_client_and_the_server_stays_in_use(proxies: dict[str, Proxy],
                                                                             kind: str) -> None:
    proxy = proxies[kind]
    home = _home(proxy, "busy")
    refused = _speech(proxy, "busy", refuse=home)
    assert refused.status_code == 429 and refused.headers["retry-after"] == "7", refused.text
    assert refused.json()["error"]["message"] == f"server {home} is busy"
    assert _home(proxy, "busy") == home  # counted as no failure: the session stays where it was
