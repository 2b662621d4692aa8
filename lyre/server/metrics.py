"""Prometheus metrics: request-side figures recorded as they happen; engine, codec,
transcriber and chat engine counters read from their stats at scrape time."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
# A transcription takes about as long as a fraction of its audio, and files run to minutes.
_TRANSCRIPTION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0)

Stats = Callable[[], Any]


def _loop_tasks() -> int:
    """Tasks on the running event loop (a scrape runs on it); 0 when read from elsewhere."""
    try:
        return len(asyncio.all_tasks())
    except RuntimeError:
        return 0


class _StatsCollector(Collector):
    """Exposes the engine's, codec's and transcriber's own counters without copying them.

    Each source is None when the server does not run it (no TTS, or no STT).
    """

    def __init__(self, engine_stats: Stats | None, codec_stats: Stats | None, stt_stats: Stats | None,
                 chat_stats: Stats | None = None, adapter_stats: Stats | None = None) -> None:
        self._engine = engine_stats
        self._codec = codec_stats
        self._stt = stt_stats
        self._chat = chat_stats
        self._adapters = adapter_stats

    def collect(self) -> Iterator[Any]:
        if self._engine is not None:
            yield from self._engine_metrics(self._engine())
        if self._codec is not None:
            yield from self._codec_metrics(self._codec())
        if self._stt is not None:
            yield from self._stt_metrics(self._stt())
        if self._chat is not None:
            yield from self._chat_engine_metrics(self._chat())
        if self._adapters is not None:
            yield from self._adapter_metrics(self._adapters())

    @staticmethod
    def _adapter_metrics(a: dict[str, float]) -> Iterator[Any]:
        for name, help_text in (("hits", "Requests whose adapter voice was resident"),
                                ("misses", "Requests that waited for their adapter voice to load"),
                                ("loads", "Adapters loaded into a slot"), ("evictions", "Adapters evicted for another"),
                                ("load_seconds", "Seconds spent loading adapters, summed")):
            yield CounterMetricFamily(f"lyre_adapter_{name}", help_text, value=a[name])
        yield GaugeMetricFamily("lyre_adapters_resident", "Adapters resident in the engine's slots", value=a["resident"])
        yield GaugeMetricFamily("lyre_adapters_resident_bytes", "Bytes of the resident adapters' weights",
                                value=a["resident_bytes"])

    @staticmethod
    def _engine_metrics(e: Any) -> Iterator[Any]:
        yield CounterMetricFamily("lyre_engine_steps", "Engine steps run", value=e.steps)
        yield CounterMetricFamily("lyre_tokens_generated", "Tokens generated, all requests", value=e.tokens)
        yield GaugeMetricFamily("lyre_engine_batch_size", "Requests in the last engine step (the compute batch)",
                                value=e.last_batch_size)
        yield GaugeMetricFamily("lyre_engine_mean_batch_size", "Mean requests per engine step", value=e.mean_batch_size)
        yield GaugeMetricFamily("lyre_engine_running", "Requests holding a KV-cache slot (resident streams)",
                                value=e.running)
        yield GaugeMetricFamily("lyre_engine_parked", "Resident streams far enough ahead to sit out of the compute "
                                "batch", value=e.parked)
        yield CounterMetricFamily("lyre_engine_deadline_misses", "Times a stream fell behind its listener",
                                  value=e.deadline_misses)
        yield GaugeMetricFamily("lyre_engine_streams_behind", "Streams behind their listener at the last step",
                                value=e.behind)
        slack = GaugeMetricFamily("lyre_engine_slack_seconds", "Streams' playback slack at the last step "
                                  "(seconds of audio made ahead of the listener)", labels=["quantile"])
        for quantile, value in zip(("0.1", "0.5", "0.9"), e.slack_p10_p50_p90 or ()):
            slack.add_metric([quantile], value)
        yield slack
        yield GaugeMetricFamily("lyre_engine_kv_cache_bytes", "Bytes of the preallocated KV cache",
                                value=e.kv_cache_bytes)
        yield GaugeMetricFamily("lyre_engine_waiting", "Requests waiting to be admitted (a row and KV-cache blocks)",
                                value=e.waiting)
        yield CounterMetricFamily("lyre_engine_queue_wait_seconds", "Seconds requests waited to be admitted, summed",
                                  value=e.queue_wait_total)
        yield from _kv_cache_metrics("lyre_engine", e)

    @staticmethod
    def _chat_engine_metrics(e: Any) -> Iterator[Any]:
        yield CounterMetricFamily("lyre_chat_engine_steps", "Chat engine steps run", value=e.steps)
        yield GaugeMetricFamily("lyre_chat_engine_batch_size", "Requests in the chat engine's last step",
                                value=e.last_batch_size)
        yield GaugeMetricFamily("lyre_chat_engine_running", "Chat requests resident (holding KV-cache blocks)",
                                value=e.running)
        yield GaugeMetricFamily("lyre_chat_engine_waiting", "Chat requests waiting to be admitted", value=e.waiting)
        yield from _kv_cache_metrics("lyre_chat_engine", e)

    @staticmethod
    def _codec_metrics(c: Any) -> Iterator[Any]:
        yield CounterMetricFamily("lyre_codec_decodes", "Decodes handed to the codec (a stream's new frames, or its "
                                  "end)", value=c.decodes)
        yield CounterMetricFamily("lyre_codec_frames", "SNAC frames decoded (each once)", value=c.frames)
        yield CounterMetricFamily("lyre_codec_batches", "SNAC decode calls", value=c.batches)
        yield CounterMetricFamily("lyre_codec_rows", "Streams decoded, summed over the codec's calls", value=c.rows)
        yield GaugeMetricFamily("lyre_codec_batch_size", "Streams in the last codec call", value=c.last_batch)
        yield GaugeMetricFamily("lyre_codec_mean_batch_size", "Mean streams per codec call", value=c.mean_batch)
        yield GaugeMetricFamily("lyre_codec_streams", "Codec streams open (one per speech segment decoding)",
                                value=c.streams)
        yield CounterMetricFamily("lyre_codec_queue_wait_seconds", "Seconds decodes waited for the codec, summed",
                                  value=c.queue_wait_total_s)
        yield GaugeMetricFamily("lyre_codec_queue_wait_max_seconds", "Longest codec queue wait", value=c.queue_wait_max_s)
        yield CounterMetricFamily("lyre_codec_dropped", "Codec decodes dropped by cancellation", value=c.dropped)

    @staticmethod
    def _stt_metrics(s: Any) -> Iterator[Any]:
        yield GaugeMetricFamily("lyre_stt_pending", "Transcriber jobs queued", value=s.pending)
        yield CounterMetricFamily("lyre_stt_finals", "Final transcription passes (files, ended utterances)",
                                  value=s.finals)
        yield CounterMetricFamily("lyre_stt_partials", "Partial passes (live transcripts so far)", value=s.partials)
        yield CounterMetricFamily("lyre_stt_partial_batches", "Batches the partial passes ran in",
                                  value=s.partial_batches)
        yield GaugeMetricFamily("lyre_stt_mean_partial_batch_size", "Mean partial passes per batch",
                                value=s.mean_partial_batch)
        yield CounterMetricFamily("lyre_stt_audio_seconds", "Audio seconds transcribed by final passes",
                                  value=s.audio_seconds)
        yield CounterMetricFamily("lyre_stt_alignments", "Forced alignments (word timestamps of given text)",
                                  value=s.alignments)
        yield CounterMetricFamily("lyre_stt_aligned_seconds", "Audio seconds aligned with given text",
                                  value=s.aligned_seconds)
        yield CounterMetricFamily("lyre_stt_busy_seconds", "Seconds the transcriber spent in the model",
                                  value=s.busy_seconds)
        yield CounterMetricFamily("lyre_stt_queue_wait_seconds", "Seconds jobs waited for the transcriber, summed",
                                  value=s.queue_wait_total_s)
        yield GaugeMetricFamily("lyre_stt_queue_wait_max_seconds", "Longest transcriber queue wait",
                                value=s.queue_wait_max_s)


class _TextCollector(Collector):
    def __init__(self, front: Any) -> None:
        self._front = front

    def collect(self) -> Iterator[Any]:
        yield CounterMetricFamily("lyre_text_normalize_texts", "Segment texts read by the text front end",
                                  value=self._front.read_texts)
        yield CounterMetricFamily("lyre_text_normalize_fallbacks", "Texts whose reading failed (a normalizer "
                                  "error) and were spoken as cleaned, as written", value=self._front.fallbacks)


class _AlignerCollector(Collector):
    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        s = self._stats()
        yield GaugeMetricFamily("lyre_aligner_pending", "Alignments waiting for the aligner's own workers",
                                value=s.pending)
        yield GaugeMetricFamily("lyre_aligner_aligned_seconds", "Audio seconds aligned by the aligner's own workers",
                                value=s.aligned_seconds)
        done = CounterMetricFamily("lyre_aligner_alignments", "Word alignments, by the aligner that placed the "
                                   "words (phones, whisper)", labels=["aligner"])
        for name, value in s.alignments.items():
            done.add_metric([name], value)
        yield done
        fallbacks = CounterMetricFamily("lyre_aligner_fallbacks", "Phone alignments that found no path: tried "
                                        "again with wide beams, or handed to Whisper", labels=["to"])
        for name, value in s.fallbacks.items():
            fallbacks.add_metric([name], value)
        yield fallbacks


class _CutsCollector(Collector):
    def __init__(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def collect(self) -> Iterator[Any]:
        cuts = CounterMetricFamily("lyre_segments_cut", "Speech segments that ended on their token budget before "
                                   "end-of-speech (words may be missing), by reason: budget (lyre's, from the "
                                   "segment's words) or max_tokens (the client's cap)", labels=["reason"])
        for reason, value in self._counts().items():
            cuts.add_metric([reason], value)
        yield cuts


def _kv_cache_metrics(prefix: str, e: Any) -> Iterator[Any]:
    """The block pool and the prefix cache of one engine (``prefix``: lyre_engine or lyre_chat_engine)."""
    kv = e.kv_cache
    if kv is None:  # the naive baseline has no block cache
        return
    blocks = GaugeMetricFamily(f"{prefix}_kv_blocks", f"KV-cache blocks of {e.block_size} positions, by state: used "
                               "(held by a request), free (held by none), cached (of the free ones, those findable "
                               "by a prefix until the pool needs them)", labels=["state"])
    for state, value in (("used", kv.used), ("cached", kv.cached), ("free", kv.free)):
        blocks.add_metric([state], value)
    yield blocks
    yield GaugeMetricFamily(f"{prefix}_kv_blocks_capacity", "Blocks in the KV cache's pool", value=kv.total)
    yield CounterMetricFamily(f"{prefix}_prefix_cache_queries", "Whole prompt blocks looked up in the prefix cache",
                              value=kv.queried)
    yield CounterMetricFamily(f"{prefix}_prefix_cache_hits", "Prompt blocks found in the prefix cache (not prefilled)",
                              value=kv.hits)
    yield GaugeMetricFamily(f"{prefix}_prefix_cache_hit_rate", "Hits over queries since start", value=kv.hit_rate)
    yield CounterMetricFamily(f"{prefix}_kv_evictions", "Cached blocks taken back for other contents",
                              value=kv.evictions)
    yield CounterMetricFamily(f"{prefix}_preemptions", "Times a request's blocks were taken back for others "
                              "(it then runs its tokens again)", value=e.preemptions)


class Metrics:
    """One registry per app, so several apps in one process never collide."""

    def watch_aligner(self, stats: Callable[[], Any]) -> None:
        """The aligner's work (``stats()``: lyre.server.aligner.AlignerStats): alignments by the aligner that
        placed the words, fallbacks, and the queue and audio of its own workers (the phone aligner, a
        Whisper of its own; the STT worker's Whisper counts in lyre_stt_*)."""
        self.registry.register(_AlignerCollector(stats))

    def watch_cuts(self, counts: Callable[[], dict[str, int]]) -> None:
        """The speech pipeline's segments cut on their budget (``counts()``: by reason), every transport's."""
        self.registry.register(_CutsCollector(counts))

    def watch_text(self, front: Any) -> None:
        """The text front end (``front``: lyre.text.front_end.TextFront): texts read, and readings that failed
        and were said as written instead."""
        self.registry.register(_TextCollector(front))

    def watch_sessions(self, count: Callable[[], int]) -> None:
        """The realtime sessions open now (``count()``): WebSockets, WebRTC calls and phone streams together,
        against ``--stt-max-sessions``. A call or stream is counted until its engine slots are free."""
        Gauge("lyre_realtime_sessions", "Realtime sessions open: sockets, WebRTC calls and phone streams",
              registry=self.registry).set_function(count)

    def count_refusals(self, event: dict[str, Any]) -> None:
        """A realtime session's event: if it is a ``session.updated`` telling what the session goes on without,
        count each refusal by its field."""
        if event["type"] == "session.updated":
            for refusal in (event["session"].get("lyre") or {}).get("refused", ()):
                self.realtime_refused.labels(str(refusal["param"])).inc()

    def count_underruns(self, api: str, gaps: list[float], counted: int) -> int:
        """A stream's listener's stalls so far (``gaps``), of which ``counted`` were counted before: count the
        new ones; the number counted now."""
        for gap in gaps[counted:]:
            self.underruns.labels(api).inc()
            self.underrun_gaps.labels(api).observe(gap)
        return len(gaps)

    def count_word_times(self, api: str, timer: Any) -> None:
        """A stream's word times are over: the audio they covered, and each segment that got none."""
        self.word_times.labels(api).inc(timer.aligned_s)
        if timer.failures:
            self.errors.labels("timestamps").inc(timer.failures)

    def __init__(self, engine_stats: Stats | None = None, codec_stats: Stats | None = None,
                 stt_stats: Stats | None = None, chat_stats: Stats | None = None,
                 adapter_stats: Stats | None = None) -> None:
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
        self.underruns = Counter("lyre_stream_underruns", "Times a stream's listener ran dry (modelled from when "
                                 "each chunk left: playing from the first at --playback-rate)", ["api"], registry=r)
        self.stalled = Counter("lyre_stalled_listeners", "Streamed answers and WebSockets cut because their "
                               "listener took nothing for --write-timeout seconds", ["api"], registry=r)
        self.underrun_gaps = Histogram("lyre_stream_underrun_seconds", "Each underrun's stall, by API", ["api"],
                                       buckets=(0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0), registry=r)
        self.requests = Counter("lyre_requests", "Requests by outcome", ["api", "outcome"], registry=r)
        self.errors = Counter("lyre_errors", "Errors by kind", ["kind"], registry=r)
        self.realtime_refused = Counter("lyre_realtime_refused", "Realtime session settings a session went on "
                                        "without (told in session.updated's lyre.refused), by field", ["param"],
                                        registry=r)
        self.twilio_refused = Counter("lyre_twilio_streams_refused", "Twilio media streams refused for their "
                                      "credential (--twilio-auth-token), by reason", ["reason"], registry=r)
        self.word_times = Counter("lyre_word_timestamps_audio_seconds",
                                  "Audio seconds given word timestamps, by API", ["api"], registry=r)
        self.transcriptions = Counter("lyre_transcription_requests", "Transcription requests by format and outcome",
                                      ["format", "outcome"], registry=r)
        self.transcription_latency = Histogram(
            "lyre_transcription_seconds", "Transcription request received to response ready, successful ones",
            buckets=_TRANSCRIPTION_BUCKETS, registry=r)
        self.inline_references = Counter(
            "lyre_inline_references", "Speech requests' own reference clips, by outcome: made into a voice, found "
            "cached, waited for another request making it, refused (too many being made)", ["outcome"], registry=r)
        self.chat_requests = Counter("lyre_chat_requests", "Chat completion requests by mode and outcome",
                                     ["mode", "outcome"], registry=r)
        self.chat_tokens = Counter("lyre_chat_tokens", "Chat tokens, prompt and completion", ["kind"], registry=r)
        self.chat_ttft = Histogram("lyre_chat_time_to_first_token_seconds",
                                   "Chat request submitted to its first generated token",
                                   buckets=_LATENCY_BUCKETS, registry=r)
        r.register(_StatsCollector(engine_stats, codec_stats, stt_stats, chat_stats, adapter_stats))
        # process_resident_memory_bytes, process_cpu_seconds_total, process_open_fds, ...: a leak shows here,
        # and in the tasks and threads the server itself starts.
        ProcessCollector(registry=r)
        Gauge("lyre_event_loop_tasks", "asyncio tasks alive on the server's event loop",
              registry=r).set_function(_loop_tasks)
        Gauge("lyre_python_threads", "Python threads alive in the server (the engine's, the codec's, each "
              "transcriber's, aiortc's, ...)", registry=r).set_function(threading.active_count)
