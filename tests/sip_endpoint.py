"""A real ``lyre serve --sip`` under test, and SIPp pointed at it (tests/server/calls/test_sip.py and
test_sip_hostile.py): SIPp runs the scenarios in tests/server/calls/sip/; the server's metrics are read back to
check that every call closed and freed what it held.

    sip = Sip(running_server, port)
    passed(sip.sipp("options.xml"))
    sip.wait_idle()
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import httpx
from serving import Server

__all__ = ["SCENARIOS", "Sip", "free_udp_port", "passed"]

SCENARIOS = Path(__file__).parent / "server" / "calls" / "sip"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sip:
    """The server, and SIPp pointed at it."""

    def __init__(self, server: Server, port: int) -> None:
        self.server, self.port = server, port
        self.tasks = self.metric("lyre_event_loop_tasks")  # the server's asyncio tasks with no call

    def sipp(self, scenario: str, *args: str, calls: int = 1, timeout_s: float = 40.0, rtp_port: int = 9,
             codec: int = 0, talk_ms: int | None = None, source: str = "127.0.0.1", number: str = "agent",
             background: bool = False) -> subprocess.Popen[str] | subprocess.CompletedProcess[str]:
        """SIPp running ``scenario`` (``calls`` of it at once); ``rtp_port``: where the offer says the caller's
        media is (9, discard, where the test does not listen); ``talk_ms``: how long a call lasts (the
        scenarios that pause)."""
        command = ["sipp", "127.0.0.1", "-p", str(free_udp_port()), "-i", source, "-s", number,
                   "-sf", str(SCENARIOS / scenario), "-m", str(calls), "-l", str(calls), "-r", "50",
                   "-nostdin", "-timeout", f"{timeout_s:g}s", "-timeout_error",
                   "-key", "codec", str(codec), "-key", "rtp_port", str(rtp_port), *args]
        if talk_ms is not None:
            command += ["-set", "talk_ms", str(talk_ms)]
        command.append(f"127.0.0.1:{self.port}")
        if background:
            return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                    cwd="/tmp")
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout_s + 10, cwd="/tmp")

    def metric(self, name: str, **labels: str) -> float:
        want = ",".join(f'{k}="{v}"' for k, v in labels.items())
        head = f"{name}{{{want}}}" if labels else name
        for line in httpx.get(f"{self.server.url}/metrics", timeout=10).text.splitlines():
            if line.startswith(head + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def wait_idle(self, timeout_s: float = 15.0) -> None:
        """Every call closed: no SIP call, realtime session or stream left."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = {name: self.metric(name) for name in ("lyre_sip_calls_active", "lyre_sip_dialogs",
                                                         "lyre_sip_tcp_connections",
                                                         "lyre_realtime_sessions", "lyre_active_streams",
                                                         "lyre_queued_requests")}
            left["tasks over those with no call"] = max(0.0, self.metric("lyre_event_loop_tasks") - self.tasks)
            if not any(left.values()):
                assert "Traceback" not in self.server.output(), self.server.output()[-3000:]  # nothing failed
                return
            assert time.monotonic() < deadline, f"still held after the calls ended: {left}"
            time.sleep(0.1)


def passed(done: subprocess.CompletedProcess[str] | subprocess.Popen[str]) -> None:
    out = done.stdout if isinstance(done.stdout, str) else ""
    assert done.returncode == 0, f"sipp exited {done.returncode}:\n{out[-3000:]}"
