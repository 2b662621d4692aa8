"""The start-up summary: what this server runs, on one screen at start-up and as JSON in ``GET /health``.

The facts are read from the loaded models (the TTS pipeline reports its own, see
`lyre.tts.TTSFacts`), never retyped from the settings, so both views show what
really runs; this module only gathers and formats them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lyre.models.choice import Weights
from lyre.server.state import ServerState
from lyre.tts import TTSFacts

__all__ = ["ServerSummary", "SideModel", "build_summary", "kv_cache_json", "summary_json", "summary_text"]


@dataclass(frozen=True)
class SideModel:
    """A model served beside text to speech: Whisper, or the chat model."""

    name: str
    device: str
    dtype: str | None = None


@dataclass(frozen=True)
class ServerSummary:
    """Everything the start-up summary says. None for a part that is off."""

    tts: TTSFacts | None
    stt: SideModel | None
    chat: SideModel | None
    max_streams: int  # speech streams at once (HTTP requests and WebSocket contexts)
    max_queue: int  # requests waiting for a stream beyond that

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.tts.warnings if self.tts is not None else ()


def build_summary(state: ServerState) -> ServerSummary:
    """The summary of the models ``state`` holds now (the adapters resident change as voices are used)."""
    config = state.config
    stt = None
    if state.stt is not None:
        stt = SideModel(config.stt_model or "Whisper base (built-in)", state.stt.config.device)
    chat = None
    if state.chat is not None:
        engine = state.chat.engine.config
        chat = SideModel(f"{state.chat.name} ({config.llm})", engine.device, engine.resolved_dtype)
    return ServerSummary(state.tts.facts() if state.tts is not None else None, stt, chat, config.serving.max_streams,
                         config.max_queue)


def summary_json(summary: ServerSummary) -> dict[str, Any]:
    """The summary as /health's ``summary`` object."""
    def side(model: SideModel | None) -> dict[str, Any] | None:
        return None if model is None else {"name": model.name, "device": model.device, "dtype": model.dtype}

    return {"tts": None if summary.tts is None else summary.tts.as_json(), "stt": side(summary.stt),
            "chat": side(summary.chat), "max_streams": summary.max_streams, "max_queue": summary.max_queue,
            "warnings": list(summary.warnings)}


def kv_cache_json(stats: Any) -> dict[str, Any] | None:
    """One engine's KV cache now, from its stats (None: it keeps no block cache, as the naive baseline)."""
    kv = stats.kv_cache
    if kv is None:
        return None
    return {"block_size": stats.block_size, "blocks": kv.total, "used": kv.used, "cached": kv.cached,
            "free": kv.free, "prefix_hit_rate": kv.hit_rate, "evictions": kv.evictions,
            "preemptions": stats.preemptions}


def summary_text(summary: ServerSummary, header: str) -> str:
    """The summary as lines for a terminal: ``header``, one fact per line, then a line per warning."""
    rows: list[tuple[str, str]] = []
    tts = summary.tts
    if tts is None:
        rows.append(("tts", "off"))
    else:
        rows += [("model", _weights(tts.model)), ("codec", _weights(tts.codec)),
                 ("device", f"{tts.device}, {tts.dtype}" + (", fp8 projections" if tts.fp8 else "")
                  + f"; codec {tts.codec_device}, {tts.codec_dtype}, CUDA graphs {_on(tts.codec_graphs)}")]
        if tts.pipeline == "lyre":
            rows.append(("decode", f"attention {tts.attention}, CUDA graphs {_on(tts.cuda_graphs)}, "
                                   f"FP8 {_on(tts.fp8)}, scheduler {tts.scheduler}"))
        else:
            rows.append(("decode", "the naive baseline: transformers generate, a thread per request"))
        if tts.kv_blocks and tts.block_size and tts.kv_bytes is not None and tts.kv_positions:
            longest = tts.kv_blocks * tts.block_size / tts.kv_positions
            rows.append(("KV cache", f"{tts.kv_blocks} blocks x {tts.block_size} positions, {_bytes(tts.kv_bytes)}: "
                                     f"{longest:.1f} requests of {tts.kv_positions} positions, more when shorter"))
    rows.append(("streams", f"{summary.max_streams} at once, {summary.max_queue} queued at most"))
    if tts is not None:
        rows.append(("adapters", "off" if not tts.max_adapters else
                     f"{tts.max_adapters} resident at most, rank {tts.lora_rank}; loaded: "
                     f"{', '.join(tts.adapters) or 'none'}"))
    for label, model in (("STT", summary.stt), ("chat", summary.chat)):
        rows.append((label, "off" if model is None else
                     f"{model.name} on {model.device}" + (f", {model.dtype}" if model.dtype else "")))
    width = max(len(label) for label, _ in rows)
    lines = [header, *(f"  {label:<{width}}  {value}" for label, value in rows)]
    lines += [f"  warning: {warning}" for warning in summary.warnings]
    return "\n".join(lines)


def _weights(weights: Weights | None) -> str:
    return "given in memory (where from is not known)" if weights is None else weights.describe()


def _on(flag: bool) -> str:
    return "on" if flag else "off"


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"
