"""``lyre bench``: a load generator for lyre (or any server speaking its HTTP and WebSocket APIs).

It talks to the server over the network only (no torch, nothing of the
server's code): one pooled HTTP client or one WebSocket per stream, a
closed-loop concurrency sweep or an open-loop arrival-rate sweep, every
request timed at the client chunk by chunk, the server's ``/metrics`` read
before and after each level, and the SLO headline: the most load held at
p90 TTFA <= 250 ms with >= 99% viable streams.

    result = asyncio.run(run_bench(BenchConfig(urls=("http://127.0.0.1:8000",))))
    print(format_table(result))
"""

from __future__ import annotations

from pathlib import Path

from lyre.bench.metrics import (
    LevelSummary,
    Slo,
    headline,
    is_viable,
    percentile,
    stream_tokens_per_second,
)
from lyre.bench.report import format_spread, format_table, to_json
from lyre.bench.runner import (
    BenchConfig,
    BenchResult,
    LevelResult,
    TargetResult,
    run_bench,
)
from lyre.bench.texts import BUILTIN_TEXTS, load_texts
from lyre.bench.trials import Trial, TrialPlan, run_trials, spread

__all__ = [
    "BUILTIN_TEXTS",
    "BenchConfig",
    "BenchResult",
    "LevelResult",
    "LevelSummary",
    "Slo",
    "TargetResult",
    "Trial",
    "TrialPlan",
    "format_spread",
    "format_table",
    "headline",
    "is_viable",
    "load_texts",
    "percentile",
    "run_bench",
    "run_trials",
    "spread",
    "stream_tokens_per_second",
    "to_json",
    "write_plots",
]


def write_plots(result: BenchResult, directory: Path) -> list[Path]:
    """Write the PNG charts (see `lyre.bench.plots`); matplotlib is imported only when this is called."""
    from lyre.bench.plots import write_plots as write

    return write(result, directory)
