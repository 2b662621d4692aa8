"""Configuration for the engine: the model's shape and the runtime's capacity."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lyre.engine.scheduler import SchedulingPolicy

__all__ = ["ATTENTION_BACKENDS", "EngineConfig", "LlamaConfig", "RopeScaling"]

# Also in lyre.engine.attention, which needs torch; kept here so the config stays plain.
ATTENTION_BACKENDS = ("gather", "sdpa", "flex")


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3 frequency-dependent RoPE scaling (``rope_type: llama3``)."""

    factor: float = 32.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192


@dataclass(frozen=True)
class LlamaConfig:
    """The subset of a Hugging Face ``LlamaForCausalLM`` config.json the model needs."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rope_theta: float = 500_000.0
    rope_scaling: RopeScaling | None = None
    rms_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 131_072

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> LlamaConfig:
        """Build from a parsed config.json; refuses architectures this model is not."""
        model_type = cfg.get("model_type")
        if model_type != "llama":
            raise ValueError(f"config.json: model_type is {model_type!r}, expected 'llama'")
        scaling = cfg.get("rope_scaling")
        rope = None
        if scaling:
            kind = scaling.get("rope_type", scaling.get("type"))
            if kind != "llama3":
                raise ValueError(f"config.json: rope_scaling type {kind!r} is not supported (only 'llama3')")
            rope = RopeScaling(
                factor=float(scaling["factor"]),
                low_freq_factor=float(scaling["low_freq_factor"]),
                high_freq_factor=float(scaling["high_freq_factor"]),
                original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
            )
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_hidden_layers=int(cfg["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(cfg.get("num_key_value_heads", heads)),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            rope_theta=float(cfg.get("rope_theta", 10_000.0)),
            rope_scaling=rope,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-5)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_position_embeddings=int(cfg.get("max_position_embeddings", 131_072)),
        )


@dataclass(frozen=True)
class EngineConfig:
    """Runtime capacity of one engine. Validated once; passed down whole.

    ``max_seq_len`` bounds prompt + generated tokens of one request. The
    default fits a long Orpheus utterance (about 25 s of audio at 82 tokens/s)
    and is never the model's 131072 positions: the KV cache is preallocated
    for ``max_batch * max_seq_len`` positions.
    """

    max_batch: int = 32
    max_seq_len: int = 2048
    max_waiting: int = 256
    device: str = "cpu"
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on CUDA
    seed: int | None = None  # seeds requests that bring no seed of their own
    # How decode attention reads the KV cache: "sdpa" in place, "flex" in place reading only live
    # blocks (compiled FlexAttention), or "gather" (copies every row's K/V each step; for comparison).
    # None: sdpa on CPU; gather on CUDA until a GPU run has shown the in-place paths' tokens equal it,
    # but sdpa with CUDA graphs (see `resolved_attention`).
    attention: str | None = None
    # Replay decode steps from CUDA graphs captured per batch bucket (CUDA only). Opt-in until a GPU
    # run has shown their tokens equal eager decoding's. Refused with gather attention.
    cuda_graphs: bool = False
    quantize: str | None = None  # "fp8": e4m3 weights with per-channel scales for the projections
    # Scheduling (lyre.engine.scheduler): "deadline" orders streams by their listeners' playback
    # deadlines and parks those far ahead; "fcfs" advances every resident request every step.
    scheduler: str = "deadline"
    compute_batch: int | None = None  # rows advanced per step; None: max_batch (every resident request)
    park_above_s: float = 2.0
    unpark_below_s: float = 1.0
    # LoRA adapters (voices): resident slots (0: none), and the rank every slot is padded to (at most 64).
    max_adapters: int = 0
    lora_rank: int = 16
    adapter_max_bytes: int | None = None  # resident adapter weights at most; None: slots decide alone

    def __post_init__(self) -> None:
        for name in ("max_batch", "max_seq_len", "max_waiting"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"EngineConfig.{name} must be a positive integer, got {value!r}")
        if self.dtype not in (None, "float32", "bfloat16", "float16"):
            raise ValueError(f"EngineConfig.dtype must be float32, bfloat16 or float16, got {self.dtype!r}")
        if self.attention not in (None, *ATTENTION_BACKENDS):
            raise ValueError(f"EngineConfig.attention must be one of {', '.join(ATTENTION_BACKENDS)}, "
                             f"got {self.attention!r}")
        if self.cuda_graphs and not self.device.startswith("cuda"):
            raise ValueError(f"EngineConfig.cuda_graphs needs a CUDA device, got {self.device!r}")
        if self.cuda_graphs and self.attention == "gather":
            # A graph's step has fixed shapes, so gather would copy every slot's whole max_seq_len of keys
            # and values, per layer, per step: the one combination graphs make slower, never faster.
            raise ValueError("--cuda-graphs with --attention gather would copy every stream's whole KV cache "
                             "(max_seq_len positions) per layer per step; use --attention sdpa or --attention flex "
                             "(both read the cache in place), or leave --attention unset (sdpa with graphs)")
        if self.quantize not in (None, "fp8"):
            raise ValueError(f"EngineConfig.quantize must be None or 'fp8', got {self.quantize!r}")
        if self.compute_batch is not None and not 1 <= self.compute_batch <= self.max_batch:
            raise ValueError(f"EngineConfig.compute_batch must be in [1, max_batch={self.max_batch}], "
                             f"got {self.compute_batch}")
        self.policy()  # validates the scheduling fields
        if not isinstance(self.max_adapters, int) or self.max_adapters < 0:
            raise ValueError(f"EngineConfig.max_adapters must be >= 0, got {self.max_adapters!r}")
        if not isinstance(self.lora_rank, int) or not 1 <= self.lora_rank <= 64:
            raise ValueError(f"EngineConfig.lora_rank must be in [1, 64], got {self.lora_rank!r}")

    def policy(self) -> SchedulingPolicy:
        return SchedulingPolicy(self.scheduler, self.compute_batch, self.park_above_s, self.unpark_below_s)

    @property
    def resolved_attention(self) -> str:
        """The decode attention path: as set, else sdpa, except gather on CUDA without graphs (the
        reference until a GPU run has compared them); graphs never get gather (see __post_init__)."""
        if self.attention is not None:
            return self.attention
        return "gather" if self.device.startswith("cuda") and not self.cuda_graphs else "sdpa"

    @property
    def resolved_dtype(self) -> str:
        if self.dtype is not None:
            return self.dtype
        return "bfloat16" if self.device.startswith("cuda") else "float32"
