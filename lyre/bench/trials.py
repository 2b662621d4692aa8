"""Trials on fresh servers: the same sweep run again and again, each time on a server started for it.

A served command (``lyre serve --port {port} ...``, the port filled in) is started for every trial of every
seed, waited for until ``/ready``, swept (each level's warm-up requests excluded, as always), then stopped:
no trial inherits another's caches, compiled graphs or memory. Each figure is then reported as its spread
across the trials (min, median, max), and a load level *held* only if it held in every trial: every request
complete, none with a playback underrun.

    runs = asyncio.run(run_trials(TrialPlan("lyre serve --port {port}", trials=3, seeds=(1, 2, 3)), config))
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TextIO

import httpx

from lyre.bench.runner import BenchConfig, BenchResult, run_bench

__all__ = ["SPREAD_FIGURES", "Trial", "TrialPlan", "check_command", "run_trials", "served", "spread"]

# The figures whose spread across trials is reported, per load level.
SPREAD_FIGURES = ("ttfb_p50_s", "ttfa_p50_s", "ttfa_audible_p50_s", "ttfa_audible_p95_s", "leading_silence_p50_s",
                  "worst_underrun_p95_s", "c50", "c100", "c200", "zero_underrun", "viable_share", "rtf_mean")
_STOP_S = 60.0  # a served process that has not exited this long after SIGTERM is killed


def check_command(command: str) -> None:
    """A served command must say where to listen: a ValueError naming ``{port}`` when it does not."""
    if "{port}" not in command:
        raise ValueError("--serve: the command must say where to listen with {port}, e.g. "
                         f"'lyre serve --port {{port}}', got {command!r}")


@dataclass(frozen=True)
class TrialPlan:
    command: str  # the server's command line; {port} becomes a free port
    trials: int = 1
    seeds: tuple[int | None, ...] = (None,)
    ready_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        check_command(self.command)
        if self.trials < 1 or not self.seeds:
            raise ValueError("--trials must be at least 1, with at least one seed")


@dataclass(frozen=True)
class Trial:
    seed: int | None
    trial: int
    command: str
    result: BenchResult


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Served:
    """One served process, its output kept in a file (read back when it fails to come up)."""

    def __init__(self, command: str) -> None:
        self.port = _free_port()
        self.command = command.format(port=self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = tempfile.TemporaryFile()
        # Its own process group: stopping it stops whatever it started.
        self.process = subprocess.Popen(shlex.split(self.command), stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    async def ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"the served command exited with {self.process.returncode}: {self.command}\n"
                                       f"{self._tail()}")
                try:
                    if (await client.get(self.url + "/ready")).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the served command was not ready within {timeout_s:g} s: {self.command}\n"
                                       f"{self._tail()}")
                await asyncio.sleep(0.5)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(_STOP_S)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._log.close()

    def _tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-3000:]


@asynccontextmanager
async def served(command: str, ready_timeout_s: float, stream: TextIO = sys.stderr,
                 what: str = "") -> AsyncIterator[tuple[str, str]]:
    """``command`` started on a free port (its ``{port}``), yielding (its URL, the command as run) once it
    answers ``/ready``; stopped (its whole process group) at the end, whatever happened."""
    check_command(command)
    server = _Served(command)
    try:
        print(f"lyre: {what}{server.command}", file=stream)
        await server.ready(ready_timeout_s)
        yield server.url, server.command
    finally:
        await asyncio.to_thread(server.stop)


async def run_trials(plan: TrialPlan, config: BenchConfig, stream: TextIO = sys.stderr) -> list[Trial]:
    """Every trial of every seed, each on a fresh server; ``config``'s URLs are replaced by the served one's."""
    runs = []
    for seed in plan.seeds:
        for trial in range(plan.trials):
            async with served(plan.command, plan.ready_timeout_s, stream,
                              f"trial {trial + 1}/{plan.trials}, seed {seed}: ") as (url, command):
                result = await run_bench(replace(config, urls=(url,), labels=(), seed=seed), stream)
            runs.append(Trial(seed, trial, command, result))
    return runs


def spread(runs: list[Trial]) -> list[dict[str, Any]]:
    """Per load level: each figure's min, median and max across the runs, and whether every run held it."""
    levels = runs[0].result.config.levels
    out = []
    for i, load in enumerate(levels):
        summaries = [run.result.targets[0].levels[i].summary for run in runs if i < len(run.result.targets[0].levels)]
        row: dict[str, Any] = {"load": load, "runs": len(summaries), "held": all(s.held for s in summaries),
                               "held_runs": sum(s.held for s in summaries)}
        for name in SPREAD_FIGURES:
            values = [v for s in summaries if (v := getattr(s, name)) is not None]
            row[name] = ({"min": min(values), "median": statistics.median(values), "max": max(values)}
                         if values else None)
        out.append(row)
    return out
