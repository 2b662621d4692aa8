"""Prometheus metrics: request-side figures recorded as they happen, engine and
codec counters read from their stats at scrape time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)


class _StatsCollector(Collector):
    """Exposes the engine's and codec's own counters without copying them."""

    def __init__(self, engine_stats: Callable[[], Any], codec_stats: Callable[[], Any]) -> None:
        self._engine = engine_stats
        self._codec = codec_stats

    def collect(self) -> Iterator[Any]:
        e, c = self._engine(), self._codec()
        yield CounterMetricFamily("lyre_engine_steps", "Engine steps run", value=e.steps)
        yield CounterMetricFamily("lyre_tokens_generated", "Tokens generated, all requests", value=e.tokens)
        yield GaugeMetricFamily("lyre_engine_batch_size", "Requests in the last engine step", value=e.last_batch_size)
        yield GaugeMetricFamily("lyre_engine_mean_batch_size", "Mean requests per engine step", value=e.mean_batch_size)
        yield GaugeMetricFamily("lyre_engine_running", "Requests holding a KV-cache slot", value=e.running)
        yield GaugeMetricFamily("lyre_engine_waiting", "Requests waiting for a KV-cache slot", value=e.waiting)
        yield CounterMetricFamily("lyre_engine_queue_wait_seconds", "Seconds requests waited for a slot, summed",
                                  value=e.queue_wait_total)
        yield CounterMetricFamily("lyre_codec_windows", "SNAC windows decoded", value=c.windows)
        yield CounterMetricFamily("lyre_codec_batches", "SNAC decode batches", value=c.batches)
        yield GaugeMetricFamily("lyre_codec_batch_size", "Windows in the last codec batch", value=c.last_batch)
        yield GaugeMetricFamily("lyre_codec_mean_batch_size", "Mean windows per codec batch", value=c.mean_batch)
        yield CounterMetricFamily("lyre_codec_queue_wait_seconds", "Seconds windows waited for the codec, summed",
                                  value=c.queue_wait_total_s)
        yield GaugeMetricFamily("lyre_codec_queue_wait_max_seconds", "Longest codec queue wait", value=c.queue_wait_max_s)
        yield CounterMetricFamily("lyre_codec_dropped_windows", "Codec windows dropped by cancellation", value=c.dropped)


class Metrics:
    """One registry per app, so several apps in one process never collide."""

    def __init__(self, engine_stats: Callable[[], Any], codec_stats: Callable[[], Any]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.ttfa = Histogram("lyre_time_to_first_audio_seconds", "Request received to first audio chunk",
                              ["api"], buckets=_LATENCY_BUCKETS, registry=r)
        self.active = Gauge("lyre_active_streams", "Streams generating now", registry=r)
        self.queued = Gauge("lyre_queued_requests", "Requests waiting for a stream", registry=r)
        self.queue_wait = Histogram("lyre_queue_wait_seconds", "Time requests waited for a stream",
                                    buckets=_LATENCY_BUCKETS, registry=r)
        self.trimmed = Histogram("lyre_trimmed_silence_seconds", "Leading silence trimmed per request",
                                 buckets=(0.0, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.5), registry=r)
        self.audio = Counter("lyre_audio_seconds", "Audio seconds sent", ["api"], registry=r)
        self.requests = Counter("lyre_requests", "Requests by outcome", ["api", "outcome"], registry=r)
        self.errors = Counter("lyre_errors", "Errors by kind", ["kind"], registry=r)
        r.register(_StatsCollector(engine_stats, codec_stats))
