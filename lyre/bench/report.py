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
from lyre.bench.runner import BenchResult, LevelResult

__all__ = ["JSON_SCHEMA_VERSION", "format_table", "to_json"]

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
        "error": r.error,
        "detail": r.detail,
        "chunks": [[t, seconds] for t, seconds in r.chunks],  # (s since sent, audio s)
    }


def _level(level: LevelResult, playback_rate: float) -> dict[str, Any]:
    return {
        **dataclasses.asdict(level.summary),
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


def format_table(result: BenchResult) -> str:
    """One row per level (and server, side by side), then errors and the SLO headline."""
    config = result.config
    unit = "streams" if config.mode == "concurrency" else "req/s"
    names = [config.name(i) for i in range(len(result.targets))]
    rows = [list(_COLUMNS)]
    for i, load in enumerate(config.levels):
        label = f"{load:g} {unit}"
        rows += [_row(label, name, target.levels[i]) for name, target in zip(names, result.targets)
                 if i < len(target.levels)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_COLUMNS))]
    lines = [f"{name}: {target.url}" for name, target in zip(names, result.targets)]
    lines.append(f"api {config.api}, {'pooled connections' if config.pooled else 'a new connection per request'}, "
                 f"max_tokens {config.max_tokens}, {len(config.texts)} texts; times in ms, "
                 f"tok/s = p50 per-stream tokens/s (82 = real time), "
                 "srv ttfa, adm wait (for a stream slot), kv wait (for a KV-cache slot) = server-side means, "
                 "misses = times a stream fell behind its listener (server)"
                 + (f"; listeners play at {config.playback_rate:g}x real time" if config.playback_rate != 1 else ""))
    lines += ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
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
