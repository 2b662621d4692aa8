"""lyre against the baseline, side by side: two real servers on loopback, one load sweep.

Starts ``lyre serve`` and ``lyre serve --engine naive`` (transformers'
generate per request plus the reference sliding-window SNAC decode) on the
same model and codec, runs the same concurrency sweep with the same texts and
seeds against each in turn with lyre's load generator, and writes the table
(markdown), every figure (JSON) and the plots into --out.

Besides the SLO headline (p90 TTFA <= 250 ms and >= 99% viable streams),
it reports, for a few looser TTFA limits and without the viability rule,
the most streams each server held: on a CPU where no stream is viable for
either pipeline, that is the figure that still tells them apart.

    .venv/bin/python benchmarks/compare.py                     # docs/bench/, about 10 minutes here
    .venv/bin/python benchmarks/compare.py --concurrency 1 2 --requests 4 --out /tmp/cmp
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from lyre import bench
from lyre.bench.metrics import LevelSummary

_READY_TIMEOUT_S = 300.0
_TTFA_LIMITS_MS = (500.0, 1000.0, 2000.0)
_NAMES = ("lyre", "baseline")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _server(*args: str) -> Iterator[str]:
    """``lyre serve ARGS`` as a child process; yields its URL once /ready answers."""
    port = _free_port()
    cmd = [sys.executable, "-m", "lyre.cli", "serve", "--port", str(port), "--log-level", "warning", *args]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(cmd)} exited with {process.returncode}")
            try:
                if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(cmd)} was not ready after {_READY_TIMEOUT_S:.0f} s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _held(levels: list[LevelSummary], ttfa_ms: float) -> float | None:
    """The most streams with every request done and p90 TTFA <= ``ttfa_ms`` (viability not required)."""
    held = [s.load for s in levels if s.requests and s.ok == s.requests and s.ttfa_p90_s is not None
            and s.ttfa_p90_s * 1000 <= ttfa_ms]
    return max(held) if held else None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f}"


def markdown(result: bench.BenchResult) -> str:
    """The side-by-side table and the headlines, as docs/benchmarks.md quotes them."""
    names = _NAMES
    lines = ["| streams | server | TTFA p50 ms | p90 | p99 | e2e p50 ms | RTF | viable | req/s | audio s/s | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, load in enumerate(result.config.levels):
        for name, target in zip(names, result.targets):
            if i >= len(target.levels):
                continue
            s, wall = target.levels[i].summary, target.levels[i].wall_s
            lines.append(
                f"| {load:g} | {name} | {_ms(s.ttfa_p50_s)} | {_ms(s.ttfa_p90_s)} | {_ms(s.ttfa_p99_s)} "
                f"| {_ms(s.e2e_p50_s)} | {s.rtf_mean or 0:.2f} | {100 * (s.viable_share or 0):.0f}% "
                f"| {s.requests_per_s or 0:.2f} | {s.audio_s_total / wall if wall else 0:.2f} "
                f"| {sum(s.errors.values())} |")
    slo = result.config.slo
    lines.append("")
    lines.append("Most concurrent streams held, by rule (- : no level held it):\n")
    lines.append("| rule | " + " | ".join(names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    strict = [target.headline for target in result.targets]
    lines.append(f"| SLO: p90 TTFA <= {slo.ttfa_p90_ms:g} ms and >= {100 * slo.viable_share:g}% viable | "
                 + " | ".join("-" if h is None else f"{h:g}" for h in strict) + " |")
    for limit in _TTFA_LIMITS_MS:
        held = [_held([lv.summary for lv in target.levels], limit) for target in result.targets]
        lines.append(f"| p90 TTFA <= {limit:g} ms, all requests done | "
                     + " | ".join("-" if h is None else f"{h:g}" for h in held) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--requests", type=int, default=8, help="measured requests per level at most")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per level at most")
    parser.add_argument("--max-tokens", type=int, default=84, help="per request (84: 12 frames, 1 s of audio)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    args = parser.parse_args()

    with ExitStack() as stack:
        urls = (stack.enter_context(_server()), stack.enter_context(_server("--engine", "naive")))
        config = bench.BenchConfig(urls=urls, levels=tuple(args.concurrency), warmup=1, duration_s=args.duration,
                                   max_requests=args.requests, max_tokens=args.max_tokens, seed=1, timeout_s=300,
                                   labels=_NAMES)
        result = asyncio.run(bench.run_bench(config))
    print(bench.format_table(result), file=sys.stderr)
    table = markdown(result)
    print(table)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.md").write_text(table)
    (args.out / "compare.json").write_text(json.dumps(bench.to_json(result), indent=1) + "\n")
    for path in bench.write_plots(result, args.out):
        os.replace(path, path.with_name(f"compare-{path.name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
