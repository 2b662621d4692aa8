"""Run `lyre serve` as a real process on a free loopback port, for tests.

A server process is forked from a process that has already imported lyre, torch and the web stack
(multiprocessing's fork server, started once per test process): the same ``lyre serve`` command line
through `lyre.cli.main`, in its own process with its own models, without paying those imports (about 4 s
of CPU) again for each of the suite's ~40 servers. A test whose environment has changed since that
process started (an offline hub, say) gets a fresh ``python -m lyre.cli`` process instead, and
tests/test_cli.py runs the real command line itself.
"""

from __future__ import annotations

import multiprocessing
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
from typing import IO, Any

import httpx

# What a server imports before it reads its arguments: loaded once, in the fork server.
_PRELOAD = ["lyre.cli", "lyre.cli.serve", "lyre.server.app", "uvicorn", "snac", "serving"]
_forks: Any = None  # the fork server's multiprocessing context, once started
_forks_env: dict[str, str] = {}  # the environment it started with


def _serve(argv: list[str], log_path: str) -> None:
    """The forked server's body: output to ``log_path``, then the command line as `lyre` runs it."""
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    from lyre.cli import main

    sys.exit(main(argv))


class _Forked:
    """A forked server with the part of `subprocess.Popen`'s interface the tests use."""

    def __init__(self, process: Any) -> None:
        self._process = process
        self.pid: int = process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(["lyre", "serve"], timeout or 0)
        return self._process.exitcode

    def send_signal(self, sig: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_server(argv: list[str], log: IO[bytes]) -> subprocess.Popen[bytes] | _Forked:
    """``lyre ARGV`` with its output in ``log`` (a named temporary file): forked from the fork server
    when this process's environment is the one it started with, else a fresh process."""
    global _forks
    if _forks is None:
        _forks = multiprocessing.get_context("forkserver")
        _forks.set_forkserver_preload(_PRELOAD)
        _forks_env.update(os.environ)
    if dict(os.environ) != _forks_env:
        return subprocess.Popen([sys.executable, "-m", "lyre.cli", *argv], stdout=log, stderr=subprocess.STDOUT)
    process = _forks.Process(target=_serve, args=(argv, log.name), daemon=False)
    process.start()
    return _Forked(process)


@dataclass(frozen=True)
class Server:
    url: str
    ws_url: str
    process: subprocess.Popen[bytes] | _Forked
    log: IO[bytes] | None = None  # its stdout and stderr together

    def output(self) -> str:
        """What the server has written to stdout and stderr so far."""
        assert self.log is not None
        # pread, not seek and read: the child writes through the same file offset.
        fd = self.log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0).decode(errors="replace")

    def rss_kb(self) -> int:
        return self._status_kb("VmRSS:")

    def peak_rss_kb(self) -> int:
        """The most memory the server has held at once since it started, or since `reset_peak_rss`."""
        return self._status_kb("VmHWM:")

    def reset_peak_rss(self) -> None:
        """Start `peak_rss_kb` again from what the server holds now (Linux's clear_refs)."""
        with open(f"/proc/{self.process.pid}/clear_refs", "w") as f:
            f.write("5")

    def _status_kb(self, field: str) -> int:
        with open(f"/proc/{self.process.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith(field))

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
    log = tempfile.NamedTemporaryFile()
    process = start_server(["serve", "--port", str(port), "--log-level", "warning", *args], log)
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
def serving_in_thread(app: object, send_buffer_bytes: int | None = None) -> Iterator[int]:
    """Serve an ASGI ``app`` (lifespan off) with uvicorn on a thread, on a free loopback port; yields the port.
    ``send_buffer_bytes``: each connection's send buffer, fixed as ``lyre serve`` fixes it (SEND_BUFFER_BYTES
    in lyre.cli.serve), for a listener that stops reading to fill within seconds."""
    import threading

    import uvicorn

    sock = socket.socket()
    if send_buffer_bytes is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer_bytes)
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
