"""A fleet on loopback for tests: a real redis-server, `lyre serve --register` processes, `lyre route` processes."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx

from serving import _Forked, _free_port, start_server

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"
_LYRE = [sys.executable, "-m", "lyre.cli"]


@dataclass
class Process:
    """One child process with its output in a temporary file (a pipe nobody reads could fill and block it)."""

    cmd: list[str]
    url: str
    process: subprocess.Popen[bytes] | _Forked = field(init=False)
    log: object = field(init=False)

    def start(self) -> Process:
        self.log = log = tempfile.NamedTemporaryFile()
        if self.cmd[:3] == _LYRE:  # forked like every test server (tests/serving.py)
            self.process = start_server(self.cmd[3:], log)
        else:
            self.process = subprocess.Popen(self.cmd, stdout=log, stderr=subprocess.STDOUT)
        return self

    def output(self) -> str:
        self.log.seek(0)  # type: ignore[attr-defined]
        return self.log.read().decode(errors="replace")  # type: ignore[attr-defined]

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 60) -> None:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def close(self) -> None:
        self.stop()
        self.log.close()  # type: ignore[attr-defined]


class Redis:
    """redis-server on a free port, no persistence; stop and start it again on the same port."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: Process | None = None

    def start(self) -> Redis:
        cmd = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = Process(cmd, self.url).start()
        import redis

        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        try:
            _wait(lambda: client.ping(), f"redis-server on port {self.port}", self.proc, timeout_s=10)
        finally:
            client.close()
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.close()
            self.proc = None


def serve(redis_url: str, *args: str, ttl_s: float = 2.0) -> Process:
    """``lyre serve --register`` on a free port (started; `wait_ready` waits for it)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "lyre.cli", "serve", "--port", str(port), "--log-level", "warning",
           "--register", redis_url, "--advertise", url, "--fleet-ttl", str(ttl_s), *args]
    return Process(cmd, url).start()


def route(redis_url: str, *args: str) -> Process:
    """``lyre route`` on a free port (started; `wait_ready` waits for it to answer). A stream or socket still
    open when a test stops it is cut after 5 s rather than the default 30 (later ``args`` win)."""
    port = _free_port()
    cmd = [sys.executable, "-m", "lyre.cli", "route", "--redis", redis_url, "--port", str(port),
           "--log-level", "warning", "--poll", "0.5", "--shutdown-grace", "5", *args]
    return Process(cmd, f"http://127.0.0.1:{port}").start()


def close_all(processes: Iterable[Process]) -> None:
    """Stop them all at once (each drains in parallel with the others), then wait for each and close its log."""
    processes = list(processes)
    for p in processes:
        if p.process.poll() is None:
            p.process.send_signal(signal.SIGTERM)
    for p in processes:
        p.close()


def wait_ready(processes: Iterable[Process], path: str = "/ready", timeout_s: float = 180) -> None:
    for p in processes:
        _wait(lambda p=p: httpx.get(p.url + path, timeout=2).status_code == 200, p.url, p, timeout_s)


def _wait(ready: object, what: str, proc: Process, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.process.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.process.returncode}:\n{proc.output()}")
        try:
            if ready():  # type: ignore[operator]
                return
        except Exception:  # not up yet: connection refused, a Redis that is still loading
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready in time:\n{proc.output()}")
        time.sleep(0.2)
