"""The server's ``/metrics`` page: its samples and the per-level deltas.

The bench scrapes the page before and after each load level; the difference
of the counters says what the server did for that level's requests (warm-up
included, since they run inside the level). A metric the server does not
expose comes out as None ("absent"), never as an error.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["Samples", "parse_metrics", "server_deltas"]

Labels = tuple[tuple[str, str], ...]  # sorted (key, value) pairs


@dataclass(frozen=True)
class Samples:
    """Every sample on one metrics page, keyed by name and label set."""

    values: Mapping[str, Mapping[Labels, float]]

    def get(self, name: str, **labels: str) -> float | None:
        """One sample's value, or None when the page has no such sample."""
        return self.values.get(name, {}).get(tuple(sorted(labels.items())))

    def total(self, name: str) -> float | None:
        """The sum over every label set of ``name`` (e.g. all ``api`` values); None when absent."""
        series = self.values.get(name)
        return sum(series.values()) if series else None

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)


def parse_metrics(text: str) -> Samples:
    """Parse a Prometheus text-format page with prometheus-client's parser.

    Line by line, so that one line the parser refuses is skipped rather than
    losing the page; comments (HELP, TYPE) carry nothing the deltas need.
    """
    values: dict[str, dict[Labels, float]] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            families = list(text_string_to_metric_families(line + "\n"))
        except ValueError:
            continue
        for sample in (s for family in families for s in family.samples):
            values.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return Samples(values)


def _delta(before: Samples | None, after: Samples | None, name: str) -> float | None:
    if before is None or after is None:
        return None
    start, end = before.total(name), after.total(name)
    if end is None:
        return None
    # A series first seen after the level started (labelled counters appear on first use) began at zero.
    return end - (start or 0.0)


def _ratio(top: float | None, bottom: float | None) -> float | None:
    if top is None or bottom is None or bottom <= 0 or math.isnan(top):
        return None
    return top / bottom


def server_deltas(before: Samples | None, after: Samples | None) -> dict[str, float | None]:
    """What the server's counters say about one level; None for each figure it cannot give.

    - ``engine_batch_mean``: tokens generated / engine steps (one token per running request per step);
    - ``codec_batch_mean``: streams decoded / codec calls (``lyre_codec_rows_total``; a server of before the
      streaming codec: its windows, ``lyre_codec_windows_total``);
    - ``engine_queue_wait_s_mean``: seconds requests waited for a KV-cache slot, per admitted
      request (``lyre_engine_admitted_total`` when exposed, else requests finished, all outcomes);
    - ``admission_wait_s_mean``: seconds waited for a stream slot, per request (histogram sum/count);
    - ``server_ttfa_s_mean``: the server's own time to first audio, all APIs (histogram sum/count);
    - ``deadline_misses``: times a stream fell behind its listener (the deadline scheduler counts them);
    - ``underruns``, ``underrun_s``: times the server's model of a listener ran dry, and their stalls summed
      (``lyre_stream_underruns_total``, ``lyre_stream_underrun_seconds``), every API;
    - ``requests``, ``tokens``: the raw counter deltas.
    """
    def d(name: str) -> float | None:
        return _delta(before, after, name)

    tokens, steps = d("lyre_tokens_generated_total"), d("lyre_engine_steps_total")
    requests = d("lyre_requests_total")
    admitted = d("lyre_engine_admitted_total")
    return {
        "engine_batch_mean": _ratio(tokens, steps),
        "codec_batch_mean": _ratio(d("lyre_codec_rows_total") if d("lyre_codec_rows_total") is not None
                                   else d("lyre_codec_windows_total"), d("lyre_codec_batches_total")),
        "engine_queue_wait_s_mean": _ratio(d("lyre_engine_queue_wait_seconds_total"),
                                           admitted if admitted is not None else requests),
        "admission_wait_s_mean": _ratio(d("lyre_queue_wait_seconds_sum"), d("lyre_queue_wait_seconds_count")),
        "server_ttfa_s_mean": _ratio(d("lyre_time_to_first_audio_seconds_sum"),
                                     d("lyre_time_to_first_audio_seconds_count")),
        "deadline_misses": d("lyre_engine_deadline_misses_total"),
        "underruns": d("lyre_stream_underruns_total"),
        "underrun_s": d("lyre_stream_underrun_seconds_sum"),
        "requests": requests,
        "tokens": tokens,
    }
