"""The outside review's findings on the phone line and stalled listeners, measured against one real server, so
a checkout before and after the fixes can be compared with the same command:

- ``rtp``: a stranger (127.0.0.2) sends one RTP packet to a call's port before the caller's first; how many of
  lyre's packets then reach the caller and the stranger in a second; and, the caller gone silent while the
  stranger sends every 0.5 s, whether lyre hangs up (and when);
- ``flood``: a stranger sends ~75 unauthenticated INVITEs a second for 3 s; of 5 INVITEs from the trusted trunk
  (127.0.0.1) among them, how many get 503;
- ``digest``: a stranger sends 10 INVITEs a second, each with a 7,000-letter Authorization header, for 6 s;
  ``GET /health``'s median and p95 before and during;
- ``stalled``: two clients ask for long speech (--max-streams 2) and never read; a third request's status, and
  how long the two slots stay held;
- ``tcp``: 64 idle TCP connections from a stranger; whether the trusted trunk's OPTIONS over TCP is answered,
  and how many of the stranger's connections are still open 40 s later;
- ``sessions``: three INVITEs over TCP whose connections close while they ring (--stt-max-sessions 3);
  realtime sessions held 5 s later, and what an ordinary call gets then.

    .venv/bin/python benchmarks/hostile.py                       # every section, on this checkout
    PYTHONPATH=/path/to/old benchmarks/hostile.py --only rtp     # the same against another checkout's lyre
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from scripted_thinker import thinking_at  # noqa: E402
from serving import Server, running_server  # noqa: E402
from sip_lines import Dialog, SipLine, invite, request  # noqa: E402
from sip_peer import RtpPeer  # noqa: E402

from lyre.server.calls.sip_media import rtp_packet  # noqa: E402

STRANGER = "127.0.0.2"


def metric(server: Server, name: str) -> float:
    for line in httpx.get(f"{server.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _finals(line: SipLine, wait_s: float) -> list[int]:
    codes, deadline = [], time.monotonic() + wait_s
    while (found := line.final(max(0.0, deadline - time.monotonic()))) is not None:
        codes.append(found[0])
    return codes


def rtp(server: Server, port: int) -> dict[str, object]:
    line, peer = SipLine(port), RtpPeer()
    stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    stranger.bind((STRANGER, 0))
    stranger.settimeout(0.01)
    got = 0
    try:
        call = Dialog(line, f"rtp-{time.time()}")
        assert call.place(rtp_port=peer.port) == 200
        peer.answered()
        assert peer.lyre is not None
        stranger.sendto(rtp_packet(0, 1, 0, 7, b"\x00" * 160), peer.lyre)
        before = len(peer.received)
        end = time.monotonic() + 1.0
        while time.monotonic() < end:
            peer._send(0, b"\xff" * 160, int(time.monotonic() * 8000))
            peer.listen(0.02)
            try:
                while stranger.recv(2048):
                    got += 1
            except (TimeoutError, BlockingIOError):
                pass
        to_caller = len(peer.received) - before
        silent = time.monotonic()
        ended = None
        while time.monotonic() - silent < 15 and ended is None:
            stranger.sendto(rtp_packet(0, 2, 160, 7, b"\x00" * 160), peer.lyre)
            if (bye := line.request_from_lyre("BYE", timeout_s=0.5)) is not None:
                ended = time.monotonic() - silent
                line.respond(bye)
        if ended is None:
            call.bye()
    finally:
        line.close()
        peer.close()
        stranger.close()
    return {"lyre's packets in 1 s to the caller": to_caller, "to the stranger": got,
            "hung up after the caller went silent (s)": round(ended, 1) if ended is not None else "not in 15 s"}


def flood(server: Server, port: int) -> dict[str, object]:
    strange, trunk = SipLine(port, STRANGER), SipLine(port)
    codes: list[int] = []
    try:
        start = time.monotonic()
        for i in range(225):  # 75 a second for 3 s
            strange.send(invite(strange, f"flood-{start}-{i}", rtp_port=None))
            if i % 45 == 20:
                trunk.send(invite(trunk, f"trunk-{start}-{i}", rtp_port=None))
                codes.append((trunk.final(3.0) or (0, ""))[0])
            time.sleep(max(0.0, start + (i + 1) / 75 - time.monotonic()))
        _finals(strange, 2.0)
    finally:
        strange.close()
        trunk.close()
    return {"trusted INVITEs answered 503 (of 5)": codes.count(503), "their codes": codes}


def _latencies(server: Server, seconds: float) -> list[float]:
    out, end = [], time.monotonic() + seconds
    with httpx.Client(timeout=30) as client:
        while time.monotonic() < end:
            start = time.perf_counter()
            client.get(f"{server.url}/health")
            out.append(1000 * (time.perf_counter() - start))
            time.sleep(0.05)
    return out


def _p(values: list[float], q: float) -> float:
    return round(sorted(values)[min(len(values) - 1, int(q * len(values)))], 1)


def digest(server: Server, port: int) -> dict[str, object]:
    idle = _latencies(server, 3.0)
    header = "Authorization: Digest " + "a" * 7000 + "\r\n"  # one long run: the old parser was quadratic in it
    strange = SipLine(port, STRANGER)
    stop = threading.Event()

    def send() -> None:
        i = 0
        while not stop.is_set():
            strange.send(request(strange, "INVITE", f"digest-{i}-{time.time()}", extra=header))
            i += 1
            time.sleep(0.1)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        loaded = _latencies(server, 6.0)
    finally:
        stop.set()
        sender.join()
        strange.close()
    return {"/health median idle (ms)": _p(idle, 0.5), "p95 idle": _p(idle, 0.95),
            "median under 10 INVITEs/s with a 7,000-letter Authorization": _p(loaded, 0.5), "p95 under it": _p(loaded, 0.95)}


def stalled(server: Server, port: int) -> dict[str, object]:
    host, http_port = server.url.removeprefix("http://").split(":")
    clients = []
    for _ in range(2):
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.connect((host, int(http_port)))
        body = json.dumps({"input": "A long answer nobody reads. " * 20, "max_tokens": 1400, "response_format": "pcm"})
        client.sendall(f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                       f"Content-Length: {len(body)}\r\n\r\n{body}".encode())
        clients.append(client)
    start = time.monotonic()
    while metric(server, "lyre_active_streams") < 2 and time.monotonic() - start < 30:
        time.sleep(0.1)
    time.sleep(2)
    third = httpx.post(f"{server.url}/v1/audio/speech", json={"input": "Me too.", "max_tokens": 28,
                                                                "response_format": "pcm"}, timeout=120).status_code
    while metric(server, "lyre_active_streams") > 0 and time.monotonic() - start < 180:
        time.sleep(0.5)
    held = time.monotonic() - start
    for client in clients:
        client.close()
    return {"a third request while two never read": third,
            "their slots held (s)": round(held, 1) if held < 180 else "over 180"}


def tcp(server: Server, port: int) -> dict[str, object]:
    idle = []
    for _ in range(64):
        s = socket.socket()
        s.bind((STRANGER, 0))
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            s.close()
            continue
        idle.append(s)
    time.sleep(0.5)
    answered = None
    try:
        trunk = SipLine(port, tcp=True)
        trunk.send(request(trunk, "OPTIONS", f"trunk-{time.time()}"))
        answered = (trunk.final(3.0) or (0, ""))[0]
        trunk.close()
    except OSError as exc:
        answered = repr(exc)
    time.sleep(40)
    still = 0
    for s in idle:
        s.setblocking(False)
        try:
            still += s.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            still += 1
        except OSError:
            pass
        s.close()
    return {"the trunk's OPTIONS over TCP": answered or "no answer (reset)",
            "the stranger's 64 connections open 40 s later": still}


def sessions(server: Server, port: int) -> dict[str, object]:
    for k in range(3):
        line = SipLine(port, tcp=True)
        line.send(invite(line, f"gone-{k}-{time.time()}", rtp_port=9))
        line.read(3.0)
        line.close()
    time.sleep(5)
    held = metric(server, "lyre_realtime_sessions")
    line = SipLine(port)
    try:
        call = Dialog(line, f"after-{time.time()}")
        code = call.place(rtp_port=9)
        if code == 200:
            call.bye()
    finally:
        line.close()
    return {"realtime sessions held 5 s after": held, "an ordinary call then": code}


SECTIONS = {"rtp": rtp, "flood": flood, "digest": digest, "stalled": stalled, "tcp": tcp, "sessions": sessions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", choices=list(SECTIONS), default=list(SECTIONS))
    args = parser.parse_args()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    session = {"max_speech_tokens": 35, "audio": {"input": {"transcription": {"language": "en"}}}}
    with thinking_at() as thinker, running_server(
            "--stt", "--llm-url", thinker, "--llm-model", "scripted", "--max-streams", "2", "--max-queue", "0",
            "--no-admit-on-rates", "--max-seq-len", "2048", "--stt-max-sessions", "3", "--sip", f"127.0.0.1:{port}",
            "--sip-ring", "0.3", "--sip-allow", "127.0.0.1/32", "--sip-auth", "lyre:secret",
            "--sip-session", json.dumps(session)) as server:
        import lyre
        print(f"lyre from {Path(lyre.__file__).parent}")
        for name in args.only:
            print(f"{name}: {json.dumps(SECTIONS[name](server, port))}", flush=True)


if __name__ == "__main__":
    main()
