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
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from lyre import bench

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' server runner
from serving import running_server

_TTFA_LIMITS_MS = (500.0, 1000.0, 2000.0)
_NAMES = ("lyre", "baseline")


def _held(levels: list[dict[str, Any]], ttfa_ms: float) -> float | None:
    """The most streams with every request done and p90 TTFA <= ``ttfa_ms`` (viability not required)."""
    held = [lv["load"] for lv in levels if lv["requests"] and lv["ok"] == lv["requests"]
            and lv["ttfa_p90_s"] is not None and lv["ttfa_p90_s"] * 1000 <= ttfa_ms]
    return max(held) if held else None


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{1000 * seconds:.0f}"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _audio_per_s(level: dict[str, Any]) -> float | None:
    """Audio seconds delivered per second of the measured window (warm-up excluded, as req/s is)."""
    if not level["ok"] or level["requests_per_s"] is None:
        return None
    return level["audio_s_total"] * level["requests_per_s"] / level["ok"]


def markdown(report: dict[str, Any]) -> str:
    """The side-by-side table and the headlines, from `lyre.bench.to_json`'s report."""
    settings, targets = report["settings"], report["targets"]
    names = settings["labels"] or [chr(ord("A") + i) for i in range(len(targets))]
    lines = ["| streams | server | TTFA p50 ms | p90 | p99 | e2e p50 ms | RTF | viable | req/s | audio s/s | errors |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, load in enumerate(settings["levels"]):
        for name, target in zip(names, targets):
            if i >= len(target["levels"]):
                continue
            lv = target["levels"][i]
            viable = "-" if lv["viable_share"] is None else f"{100 * lv['viable_share']:.0f}%"
            lines.append(
                f"| {load:g} | {name} | {_ms(lv['ttfa_p50_s'])} | {_ms(lv['ttfa_p90_s'])} | {_ms(lv['ttfa_p99_s'])} "
                f"| {_ms(lv['e2e_p50_s'])} | {_num(lv['rtf_mean'])} | {viable} | {_num(lv['requests_per_s'])} "
                f"| {_num(_audio_per_s(lv))} | {sum(lv['errors'].values())} |")
    slo = settings["slo"]
    lines += ["", "Most concurrent streams held, by rule (- : no level held it):", "",
              "| rule | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    rows = [(f"SLO: p90 TTFA <= {slo['ttfa_p90_ms']:g} ms and >= {100 * slo['viable_share']:g}% viable",
             [target["headline"] for target in targets])]
    rows += [(f"p90 TTFA <= {limit:g} ms, all requests done", [_held(target["levels"], limit) for target in targets])
             for limit in _TTFA_LIMITS_MS]
    for rule, held in rows:
        lines.append(f"| {rule} | " + " | ".join("-" if h is None else f"{h:g}" for h in held) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--requests", type=int, default=8, help="measured requests per level at most")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds per level at most")
    parser.add_argument("--max-tokens", type=int, default=84, help="per request (84: 12 frames, 1 s of audio)")
    parser.add_argument("--out", type=Path, default=Path("docs/bench"))
    parser.add_argument("--from-json", type=Path, metavar="PATH",
                        help="measure nothing: print the table of an earlier run's compare.json")
    args = parser.parse_args()
    if args.from_json:
        print(markdown(json.loads(args.from_json.read_text())), end="")
        return 0

    with ExitStack() as stack:
        urls = tuple(stack.enter_context(running_server(*extra, timeout_s=300)).url
                     for extra in ((), ("--engine", "naive")))
        config = bench.BenchConfig(urls=urls, levels=tuple(args.concurrency), warmup=1, duration_s=args.duration,
                                   max_requests=args.requests, max_tokens=args.max_tokens, seed=1, timeout_s=300,
                                   labels=_NAMES)
        result = asyncio.run(bench.run_bench(config))
    print(bench.format_table(result), file=sys.stderr)
    report = bench.to_json(result)
    table = markdown(report)
    print(table, end="")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "compare.md").write_text(table)
    (args.out / "compare.json").write_text(json.dumps(report, indent=1) + "\n")
    for path in bench.write_plots(result, args.out):
        os.replace(path, path.with_name(f"compare-{path.name}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
