"""Run `lyre serve` as a real process on a free loopback port, for tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO

import httpx


@dataclass(frozen=True)
class Server:
    url: str
    ws_url: str
    process: subprocess.Popen[bytes]
    log: IO[bytes] | None = None  # its stdout and stderr together

    def output(self) -> str:
        """What the server has written to stdout and stderr so far."""
        assert self.log is not None
        # pread, not seek and read: the child writes through the same file offset.
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def rss_kb(self) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    def metric(self, name: str, headers: dict[str, str] | None = None) -> float:
        text = httpx.get(f"{self.url}/metrics", headers=headers, timeout=10).text
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        raise KeyError(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running_server(*args: str, timeout_s: float = 180.0) -> Iterator[Server]:
    """``lyre serve ARGS`` as a child process on a free port, once /ready answers; SIGTERM at the end.

    Its output goes to a temporary file, not a pipe: nobody reads a pipe while
    it runs, and a server that logs 64 KiB into a full pipe would block.
    """
    port = _free_port()
    cmd = [sys.executable, "-m", "lyre.cli", "serve", "--port", str(port), "--log-level", "warning", *args]
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"lyre serve exited with {process.returncode}:\n{log.read().decode()}")
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("lyre serve did not become ready in time")
            time.sleep(0.25)
        yield Server(url=url, ws_url=f"ws://127.0.0.1:{port}", process=process, log=log)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextmanager
def serving_in_thread(app: object) -> Iterator[int]:
    """Serve an ASGI ``app`` (lifespan off) with uvicorn on a thread, on a free loopback port; yields the port."""
    import threading

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning"))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not uv.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert uv.started, "uvicorn did not start"
        yield int(sock.getsockname()[1])
    finally:
        uv.should_exit = True
        thread.join(10)
        sock.close()
