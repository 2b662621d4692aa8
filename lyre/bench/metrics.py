"""The benchmark's arithmetic: percentiles, streaming viability, per-level summaries, the SLO headline.

Pure functions over numbers and chunk timelines, no I/O, so every figure the
bench reports can be checked by hand. A *timeline* is one request's audio as
it arrived: ``(t, seconds)`` pairs, ``t`` the chunk's arrival in seconds
since the request was sent and ``seconds`` the audio it carried, in order.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lyre.bench.playback import C_BOUNDS_S, Playback, play
from lyre.orpheus import TOKENS_PER_SECOND

__all__ = [
    "Chunk",
    "LevelSummary",
    "Measured",
    "Slo",
    "headline",
    "is_viable",
    "mean",
    "percentile",
    "real_time_factor",
    "stream_tokens_per_second",
    "summarize",
]

Chunk = tuple[float, float]  # (arrival in s since the request was sent, audio seconds it carried)

# Timelines are sums of float durations (0.1 + 0.2 != 0.3): a chunk arriving
# "exactly" on its deadline must not be judged late by rounding.
_EDGE_TOLERANCE_S = 1e-9


def percentile(values: Iterable[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100), interpolating linearly between ranks; None for no values.

    The rank of ``q`` among ``n`` sorted values is ``q / 100 * (n - 1)``: the
    same definition as numpy's default, so p50 of an even count is the mean of
    the middle two and one value is every percentile of itself.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    rank = q / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def mean(values: Iterable[float]) -> float | None:
    """The arithmetic mean; None for no values."""
    items = list(values)
    return sum(items) / len(items) if items else None


def is_viable(chunks: Sequence[Chunk], playback_rate: float = 1.0) -> bool:
    """True when the stream could be played without a gap from its first chunk on.

    Playback starts when chunk 1 arrives (``t_1``); chunk ``i`` (i >= 2) is in
    time when ``t_i - t_1`` is at most the audio of chunks ``1..i-1`` (played
    at ``playback_rate`` times real time: a listener at 0.25 takes four seconds
    over each second of audio). A stream with no audio is not viable (there is
    nothing to play); one chunk is.
    """
    if not chunks:
        return False
    start, buffered = chunks[0]
    for arrival, seconds in chunks[1:]:
        if arrival - start > buffered / playback_rate + _EDGE_TOLERANCE_S:
            return False
        buffered += seconds
    return True


def stream_tokens_per_second(chunks: Sequence[Chunk]) -> float | None:
    """The rate at which one stream's audio was made, in Orpheus tokens per second.

    Counted from the first chunk's arrival to the last's: the audio of chunks
    2..n (chunk 1's was made before the clock starts), converted to tokens at
    7 tokens per 2048-sample frame (82.03 tokens per audio second), divided by
    ``t_last - t_first``. 82.03 is exactly real time; above it the stream runs
    ahead of playback. None with fewer than two chunks or no time between them.
    The server's trimmed leading silence is not in the audio, so this slightly
    understates the tokens the engine made.
    """
    if len(chunks) < 2:
        return None
    elapsed = chunks[-1][0] - chunks[0][0]
    if elapsed <= 0:
        return None
    later_audio = sum(seconds for _, seconds in chunks[1:])
    return later_audio * TOKENS_PER_SECOND / elapsed


def real_time_factor(e2e_s: float, audio_s: float) -> float | None:
    """End-to-end time over audio length: below 1, the audio was made faster than it plays."""
    return e2e_s / audio_s if audio_s > 0 else None


@dataclass(frozen=True)
class Measured:
    """One request, as the summary needs it; ``error`` is None for a complete response."""

    sent_at: float  # seconds since the level started
    e2e_s: float
    chunks: Sequence[Chunk]
    error: str | None = None
    ttfb_s: float | None = None
    leading_silence_s: float | None = None  # audio before the first audible sample; None: nothing audible

    @property
    def ok(self) -> bool:
        return self.error is None

    def heard(self, playback_rate: float = 1.0) -> Playback:
        """What a listener starting at the first audible sample hears (lyre.bench.playback)."""
        return play(self.chunks, self.leading_silence_s, playback_rate)

    @property
    def ttfa_s(self) -> float | None:
        return self.chunks[0][0] if self.chunks else None

    @property
    def audio_s(self) -> float:
        return sum(seconds for _, seconds in self.chunks)


@dataclass(frozen=True)
class Slo:
    """The service level a load level must hold to count toward the headline."""

    ttfa_p90_ms: float = 250.0
    viable_share: float = 0.99

    def __post_init__(self) -> None:
        if self.ttfa_p90_ms <= 0:
            raise ValueError(f"SLO TTFA must be positive, got {self.ttfa_p90_ms} ms")
        if not 0 <= self.viable_share <= 1:
            raise ValueError(f"SLO viable share must be in [0, 1], got {self.viable_share}")


@dataclass(frozen=True)
class LevelSummary:
    """Client-side figures for one load level (warm-up requests excluded). Times in seconds."""

    load: float  # concurrent streams, or requests per second
    requests: int  # measured requests sent
    ok: int
    errors: Mapping[str, int] = field(default_factory=dict)
    ttfa_p50_s: float | None = None
    ttfa_p90_s: float | None = None
    ttfa_p99_s: float | None = None
    e2e_p50_s: float | None = None
    e2e_p90_s: float | None = None
    rtf_mean: float | None = None
    # Failed requests count as not viable: a user heard no complete answer.
    viable_share: float | None = None
    requests_per_s: float | None = None  # complete responses per second of the measured window
    tokens_per_s_p50: float | None = None
    audio_s_total: float = 0.0
    # As the field reports it (lyre.bench.playback): the first byte, the first audible sample, the leading
    # silence, and each request's worst playback underrun (a failed request has none to count: it is not
    # within any bound, nor free of underruns).
    ttfb_p50_s: float | None = None
    ttfa_p95_s: float | None = None
    ttfa_audible_p50_s: float | None = None
    ttfa_audible_p95_s: float | None = None
    leading_silence_p50_s: float | None = None
    worst_underrun_p95_s: float | None = None
    c50: float | None = None
    c100: float | None = None
    c200: float | None = None
    zero_underrun: float | None = None

    @property
    def held(self) -> bool:
        """Every request complete and played without an underrun: the load counts (as the field counts it)."""
        return self.requests > 0 and self.ok == self.requests and self.zero_underrun == 1.0

    def meets(self, slo: Slo) -> bool:
        """True when p90 TTFA and the viable share both hold the SLO."""
        return (
            self.ttfa_p90_s is not None
            and self.viable_share is not None
            and self.ttfa_p90_s * 1000 <= slo.ttfa_p90_ms
            and self.viable_share >= slo.viable_share
        )


def summarize(load: float, requests: Sequence[Measured], playback_rate: float = 1.0) -> LevelSummary:
    """Summarise one level's measured requests (pass warm-up requests in and they count);
    viability for listeners playing at ``playback_rate`` times real time."""
    done = [r for r in requests if r.ok]
    ttfas = [t for r in done if (t := r.ttfa_s) is not None]
    heard = [r.heard(playback_rate) for r in done]
    audible = [t for h in heard if (t := h.audible_at_s) is not None]
    worst = [h.worst_underrun_s for h in heard]

    def share(within: float) -> float | None:
        return sum(w <= within for w in worst) / len(requests) if requests else None

    rtfs = [x for r in done if (x := real_time_factor(r.e2e_s, r.audio_s)) is not None]
    rates = [x for r in done if (x := stream_tokens_per_second(r.chunks)) is not None]
    errors = Counter(r.error for r in requests if r.error is not None)
    throughput = None
    if done:
        # The measured window: first measured send to last measured completion.
        window = max(r.sent_at + r.e2e_s for r in requests) - min(r.sent_at for r in requests)
        throughput = len(done) / window if window > 0 else None
    return LevelSummary(
        load=load,
        requests=len(requests),
        ok=len(done),
        errors=dict(sorted(errors.items())),
        ttfa_p50_s=percentile(ttfas, 50),
        ttfa_p90_s=percentile(ttfas, 90),
        ttfa_p99_s=percentile(ttfas, 99),
        e2e_p50_s=percentile((r.e2e_s for r in done), 50),
        e2e_p90_s=percentile((r.e2e_s for r in done), 90),
        rtf_mean=mean(rtfs),
        viable_share=sum(is_viable(r.chunks, playback_rate) for r in done) / len(requests) if requests else None,
        requests_per_s=throughput,
        tokens_per_s_p50=percentile(rates, 50),
        audio_s_total=sum(r.audio_s for r in done),
        ttfb_p50_s=percentile((t for r in done if (t := r.ttfb_s) is not None), 50),
        ttfa_p95_s=percentile(ttfas, 95),
        ttfa_audible_p50_s=percentile(audible, 50),
        ttfa_audible_p95_s=percentile(audible, 95),
        leading_silence_p50_s=percentile((s for r in done if (s := r.leading_silence_s) is not None), 50),
        worst_underrun_p95_s=percentile(worst, 95),
        c50=share(C_BOUNDS_S[0]),
        c100=share(C_BOUNDS_S[1]),
        c200=share(C_BOUNDS_S[2]),
        zero_underrun=sum(h.underruns == 0 for h in heard) / len(requests) if requests else None,
    )


def headline(levels: Sequence[LevelSummary], slo: Slo) -> float | None:
    """The highest load that held the SLO, or None when none did.

    Every level is judged on its own: a level that passes above one that
    failed still counts, since the sweep measured it holding the SLO.
    """
    held = [level.load for level in levels if level.meets(slo)]
    return max(held) if held else None
