"""The live progress line on stderr while a level runs: requests done, errors, current p50 TTFA."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

from lyre.bench.load import RequestRecord
from lyre.bench.metrics import percentile

__all__ = ["Progress"]

_TTY_INTERVAL_S = 0.25  # redrawn in place on a terminal
_LOG_INTERVAL_S = 5.0  # a new line this often when stderr is a file or a pipe


class Progress:
    """Counts one level's measured requests as they finish and shows them."""

    def __init__(self, label: str, total: int, stream: TextIO) -> None:
        self._label = label
        self._total = total
        self._stream = stream
        self._tty = stream.isatty()
        self._done = 0
        self._errors = 0
        self._warmup = 0
        self._ttfas: list[float] = []
        self._started = time.perf_counter()

    def record(self, record: RequestRecord) -> None:
        """Take one finished request into the counts."""
        if record.warmup:
            self._warmup += 1
            return
        self._done += 1
        result = record.result
        if result.error is not None:
            self._errors += 1
        elif result.chunks:
            self._ttfas.append(result.chunks[0][0])

    def line(self) -> str:
        p50 = percentile(self._ttfas, 50)
        ttfa = "-" if p50 is None else f"{1000 * p50:.0f} ms"
        return (f"{self._label}: {self._done}/{self._total} done ({self._warmup} warm-up), "
                f"{self._errors} errors, p50 TTFA {ttfa}, {time.perf_counter() - self._started:.1f} s")

    def _show(self, final: bool = False) -> None:
        if self._tty:
            end = "\n" if final else ""
            self._stream.write(f"\r\x1b[2K{self.line()}{end}")  # \x1b[2K: clear the old, longer line
        else:
            self._stream.write(self.line() + "\n")
        self._stream.flush()

    @asynccontextmanager
    async def live(self) -> AsyncIterator[None]:
        """Show the line while the body runs, and its final state after."""
        async def tick() -> None:
            interval = _TTY_INTERVAL_S if self._tty else _LOG_INTERVAL_S
            while True:
                await asyncio.sleep(interval)
                self._show()

        ticker = asyncio.create_task(tick())
        try:
            yield
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            self._show(final=True)
