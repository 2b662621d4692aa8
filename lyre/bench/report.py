"""The bench's results as a table for people and a JSON document for machines."""

from __future__ import annotations

import dataclasses
import platform
import sys
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from lyre.bench.load import RequestRecord
from lyre.bench.metrics import is_viable, real_time_factor, stream_tokens_per_second
from lyre.bench.playback import AUDIBLE_DBFS
from lyre.bench.runner import BenchResult, LevelResult

__all__ = ["JSON_SCHEMA_VERSION", "format_spread", "format_table", "to_json"]

JSON_SCHEMA_VERSION = 1
_ABSENT = "-"


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version(), "platform": platform.platform()}
    for package in ("lyre", "httpx", "websockets"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def _record(record: RequestRecord, playback_rate: float) -> dict[str, Any]:
    r = record.result
    audio = sum(seconds for _, seconds in r.chunks)
    complete = r.error is None
    heard = record.measured().heard(playback_rate)
    return {
        "index": record.index,
        "text_index": record.text_index,
        "warmup": record.warmup,
        "sent_at_s": record.sent_at,
        "ttfa_s": r.chunks[0][0] if r.chunks else None,
        "e2e_s": r.e2e_s,
        "audio_s": audio,
        "viable": complete and is_viable(r.chunks, playback_rate),
        "rtf": real_time_factor(r.e2e_s, audio) if complete else None,
        "tokens_per_s": stream_tokens_per_second(r.chunks) if complete else None,
        "ttfb_s": r.ttfb_s,
        "ttfa_audible_s": heard.audible_at_s,
        "leading_silence_s": r.leading_silence_s,
        "underruns": heard.underruns,
        "worst_underrun_s": heard.worst_underrun_s,
        "error": r.error,
        "detail": r.detail,
        "chunks": [[t, seconds] for t, seconds in r.chunks],  # (s since sent, audio s)
    }


def _level(level: LevelResult, playback_rate: float) -> dict[str, Any]:
    s = level.summary
    return {
        **dataclasses.asdict(s),
        "ttfa_audible_ms": {"p50": _ms_value(s.ttfa_audible_p50_s), "p95": _ms_value(s.ttfa_audible_p95_s)},
        "held": s.held,
        "wall_s": level.wall_s,
        "server": level.server,
        "records": [_record(record, playback_rate) for record in level.records],
    }


def to_json(result: BenchResult) -> dict[str, Any]:
    """Every figure, every request (warm-up ones marked) and the exact settings; times in seconds."""
    return {
        "schema_version": JSON_SCHEMA_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": sys.argv,
        "settings": result.config.settings(),
        "versions": _versions(),
        "targets": [
            {"url": target.url, "headline": target.headline, "levels": [_level(level, result.config.playback_rate) for level in target.levels]}
            for target in result.targets
        ],
    }


def _ms(seconds: float | None) -> str:
    return _ABSENT if seconds is None else f"{1000 * seconds:.0f}"


def _ms_value(seconds: float | None) -> float | None:
    return None if seconds is None else round(1000 * seconds, 1)


def _num(value: float | None, digits: int) -> str:
    return _ABSENT if value is None else f"{value:.{digits}f}"


_COLUMNS = ("load", "server", "sent", "ok", "err", "ttfa p50", "p90", "p99", "e2e p50", "p90", "rtf", "viable",
            "req/s", "tok/s", "eng.batch", "codec.batch", "srv ttfa", "adm wait", "kv wait", "misses")


def _row(load: str, name: str, level: LevelResult) -> list[str]:
    s, server = level.summary, level.server
    return [
        load, name, str(s.requests), str(s.ok), str(sum(s.errors.values())),
        _ms(s.ttfa_p50_s), _ms(s.ttfa_p90_s), _ms(s.ttfa_p99_s), _ms(s.e2e_p50_s), _ms(s.e2e_p90_s),
        _num(s.rtf_mean, 2), _num(s.viable_share, 2), _num(s.requests_per_s, 2), _num(s.tokens_per_s_p50, 0),
        _num(server.get("engine_batch_mean"), 2), _num(server.get("codec_batch_mean"), 2),
        _ms(server.get("server_ttfa_s_mean")), _ms(server.get("admission_wait_s_mean")),
        _ms(server.get("engine_queue_wait_s_mean")), _num(server.get("deadline_misses"), 0),
    ]


_FIELD_COLUMNS = ("load", "server", "ttfb p50", "ttfa p50", "p95", "audible p50", "p95", "silence p50",
                  "worst gap p95", "C50", "C100", "C200", "no gap", "held")


def _field_row(load: str, name: str, level: LevelResult) -> list[str]:
    s = level.summary
    return [load, name, _ms(s.ttfb_p50_s), _ms(s.ttfa_p50_s), _ms(s.ttfa_p95_s), _ms(s.ttfa_audible_p50_s),
            _ms(s.ttfa_audible_p95_s), _ms(s.leading_silence_p50_s), _ms(s.worst_underrun_p95_s), _num(s.c50, 2),
            _num(s.c100, 2), _num(s.c200, 2), _num(s.zero_underrun, 2), "yes" if s.held else "no"]


def _aligned(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]


def _gaps(name: str, load: str, level: LevelResult, playback_rate: float) -> str:
    """One level's gaps as the client heard them beside the server's count for the same requests."""
    heard = [(r, r.measured().heard(playback_rate)) for r in level.records]
    client = sum(h.underruns for r, h in heard if r.result.error is None)
    server = level.server.get("underruns")
    worst = [round(1000 * h.worst_underrun_s) for r, h in heard if not r.warmup and r.result.error is None]
    refused = sum(r.result.error is not None and "429" in r.result.error for r, _ in heard)
    return (f"gaps {name} at {load}: underruns client {client} / server {_num(server, 0)} (every request, warm-up "
            f"included); worst gap per measured request (ms) {worst}: over 20 ms {sum(w > 20 for w in worst)}, "
            f"over 50 ms {sum(w > 50 for w in worst)}; refused (429) {refused}")


def format_table(result: BenchResult) -> str:
    """One row per level (and server, side by side), then errors and the SLO headline."""
    config = result.config
    unit = "streams" if config.mode == "concurrency" else "req/s"
    names = [config.name(i) for i in range(len(result.targets))]
    rows, field = [list(_COLUMNS)], [list(_FIELD_COLUMNS)]
    for i, load in enumerate(config.levels):
        label = f"{load:g} {unit}"
        pairs = [(name, target.levels[i]) for name, target in zip(names, result.targets) if i < len(target.levels)]
        rows += [_row(label, name, level) for name, level in pairs]
        field += [_field_row(label, name, level) for name, level in pairs]
    lines = [f"{name}: {target.url}" for name, target in zip(names, result.targets)]
    lines.append(f"api {config.api}, {'pooled connections' if config.pooled else 'a new connection per request'}, "
                 f"max_tokens {config.max_tokens}, {len(config.texts)} texts; times in ms, "
                 f"tok/s = p50 per-stream tokens/s (82 = real time), "
                 "srv ttfa, adm wait (for a stream slot), kv wait (for a KV-cache slot) = server-side means, "
                 "misses = times a stream fell behind its listener (server)"
                 + (f"; listeners play at {config.playback_rate:g}x real time" if config.playback_rate != 1 else ""))
    lines += _aligned(rows)
    lines.append(f"as the field reports it (ms): time to first byte; to the first sample; to the first audible "
                 f"sample (at or above {AUDIBLE_DBFS:g} dBFS) and the silence before it; each request's worst "
                 f"playback underrun (a listener starting at that sample), its p95, and the share of requests "
                 f"whose worst is within 50 / 100 / 200 ms (C50 / C100 / C200) or that had none; held: every "
                 f"request complete with no underrun")
    lines += _aligned(field)
    for i, load in enumerate(config.levels):
        lines += [_gaps(name, f"{load:g} {unit}", target.levels[i], config.playback_rate)
                  for name, target in zip(names, result.targets) if i < len(target.levels)]
    for name, target in zip(names, result.targets):
        for level in target.levels:
            if level.summary.errors:
                kinds = ", ".join(f"{kind} x{count}" for kind, count in level.summary.errors.items())
                lines.append(f"errors {name} at {level.summary.load:g} {unit}: {kinds}")
    slo = config.slo
    rule = f"p90 TTFA <= {slo.ttfa_p90_ms:g} ms and >= {100 * slo.viable_share:g}% viable streams"
    for name, target in zip(names, result.targets):
        held = "no level held it" if target.headline is None else f"{target.headline:g} {unit}"
        lines.append(f"headline {name}: {held} ({rule})")
    return "\n".join(lines)


def _triple(cell: dict[str, float] | None, scale: float = 1000.0, digits: int = 0) -> str:
    """min / median / max of a figure across trials (ms by default)."""
    if cell is None:
        return _ABSENT
    return "/".join(f"{scale * cell[k]:.{digits}f}" for k in ("min", "median", "max"))


def format_spread(rows: list[dict[str, Any]], unit: str) -> str:
    """Each level's figures across trials on fresh servers: min/median/max, and how many trials held it."""
    head = ["load", "held", "ttfb p50", "ttfa p50", "audible p50", "audible p95", "worst gap p95", "C50", "C100",
            "C200", "no gap"]
    table = [head]
    for row in rows:
        table.append([f"{row['load']:g} {unit}", f"{row['held_runs']}/{row['runs']}", _triple(row["ttfb_p50_s"]),
                      _triple(row["ttfa_p50_s"]), _triple(row["ttfa_audible_p50_s"]),
                      _triple(row["ttfa_audible_p95_s"]), _triple(row["worst_underrun_p95_s"]),
                      *(_triple(row[c], 1.0, 2) for c in ("c50", "c100", "c200", "zero_underrun"))])
    lines = ["across trials on fresh servers (min/median/max; ms, shares): held = runs with every request "
             "complete and no playback underrun"]
    return "\n".join(lines + _aligned(table))
