"""What a caller may ask of one utterance, and how a TTS pipeline is run: the settings the server passes down.

The server knows nothing of the engine: it builds these, and `lyre.tts`
turns them into the engine's sampling and configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lyre.common.device import resolve_device
from lyre.common.threads import split_cores
from lyre.engine import ATTENTION_BACKENDS, SCHEDULERS, EngineConfig, SamplingParams
from lyre.engine.config import gib_to_bytes
from lyre.tts.sampling import speech_sampling

__all__ = ["PipelineBusy", "SpeechOptions", "ServingConfig", "checked"]


class PipelineBusy(RuntimeError):
    """The pipeline's queue is full: retry later."""


@dataclass(frozen=True)
class SpeechOptions:
    """Sampling for one utterance; None: Orpheus's defaults (temperature 0.6, top_p 0.8,
    repetition_penalty 1.3). ``max_tokens`` caps each segment (a sentence or a few) of the utterance, not the
    whole; unset, each segment gets the budget its words need (lyre.tts.budget), up to the server's limit."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        self.sampling(max_tokens_limit=2**31)  # ValueError naming the field at fault

    def sampling(self, max_tokens_limit: int) -> SamplingParams:
        """The engine's sampling: Orpheus's stop token, whole frames, an unset max_tokens the limit (each segment
        then gets its own budget within it)."""
        given = {name: value for name, value in vars(self).items() if value is not None}
        given.setdefault("max_tokens", max_tokens_limit)
        return speech_sampling(SamplingParams(**given))


def checked(options: SpeechOptions | None, max_tokens_limit: int) -> SamplingParams:
    """``options`` as the engine's sampling; ValueError when max_tokens is over the pipeline's limit."""
    options = options or SpeechOptions()
    if options.max_tokens is not None and options.max_tokens > max_tokens_limit:
        raise ValueError(f"max_tokens: {options.max_tokens} is over this server's limit of {max_tokens_limit}")
    return options.sampling(max_tokens_limit)


@dataclass(frozen=True)
class ServingConfig:
    """How the pipeline runs: where, how many streams, which levers. Validated once."""

    device: str = "cpu"  # or cuda[:N], or "auto" (resolved here: the first CUDA device, else the CPU)
    max_streams: int = 8  # streams resident at once (rows of the engine; the KV cache is shared, by the block)
    compute_batch: int | None = None  # streams advanced per engine step; None: all resident
    max_seq_len: int = 2048  # positions one request may use, prompt and audio together
    kv_cache_gb: float | None = None  # the KV cache's size; None: max_streams requests of max_seq_len
    kv_cache_fraction: float | None = None  # or this share of the device's free memory once the weights are in
    max_step_tokens: int | None = None  # tokens one engine step runs at most (prompts beyond it go in chunks);
    # None: 512, or twice max_streams where that is more
    prefix_caching: bool = True  # reuse the KV cache of prompt prefixes seen before
    attention: str | None = None  # see EngineConfig.attention
    cuda_graphs: bool = False
    quantize: str | None = None  # "fp8"
    scheduler: str = "deadline"  # or "fcfs"
    playback_rate: float = 1.0  # listeners play at this times real time (below 1: experiments on slow hardware)
    codec_dtype: str = "float32"  # or "bfloat16"
    codec_graphs: bool = False
    max_adapters: int = 0  # LoRA voices resident at once (0: none)
    lora_rank: int = 16  # the rank every adapter slot holds (adapters of lower rank are padded), at most 64
    # torch's intra-op threads in the engine's thread and in the codec's (lyre.common.threads). None: on a CPU,
    # the process's threads split between the two (`split_cores`); on a GPU, torch's default.
    engine_threads: int | None = None
    codec_threads: int | None = None

    def __post_init__(self) -> None:
        # Resolved once, here, so the engine and the codec see a concrete device (and bf16 follows CUDA).
        object.__setattr__(self, "device", resolve_device(self.device))
        if self.attention not in (None, *ATTENTION_BACKENDS):
            raise ValueError(f"attention must be one of {', '.join(ATTENTION_BACKENDS)}, got {self.attention!r}")
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be one of {', '.join(SCHEDULERS)}, got {self.scheduler!r}")
        if not self.playback_rate > 0:
            raise ValueError(f"playback_rate must be > 0, got {self.playback_rate}")
        if self.codec_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"codec_dtype must be float32 or bfloat16, got {self.codec_dtype!r}")
        for name in ("engine_threads", "codec_threads"):
            if (value := getattr(self, name)) is not None and not (isinstance(value, int) and value >= 1):
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        self.engine_config()  # the engine's own checks, naming the field

    def engine_config(self, seed: int | None = None) -> EngineConfig:
        return EngineConfig(max_batch=self.max_streams, max_seq_len=self.max_seq_len, device=self.device,
                            attention=self.attention, cuda_graphs=self.cuda_graphs, quantize=self.quantize,
                            scheduler=self.scheduler, compute_batch=self.compute_batch, seed=seed,
                            max_adapters=self.max_adapters, lora_rank=self.lora_rank,
                            kv_cache_bytes=gib_to_bytes(self.kv_cache_gb), kv_cache_fraction=self.kv_cache_fraction,
                            max_step_tokens=self.max_step_tokens, prefix_caching=self.prefix_caching,
                            threads=self.threads()[0])

    def threads(self) -> tuple[int | None, int | None]:
        """(engine threads, codec threads): as given; on a CPU, what is not given from `split_cores`."""
        engine, codec = self.engine_threads, self.codec_threads
        if self.device == "cpu":
            split = split_cores(torch.get_num_threads())
            engine, codec = engine or split[0], codec or split[1]
        return engine, codec
