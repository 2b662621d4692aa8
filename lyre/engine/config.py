"""Configuration for the engine: the runtime's capacity (the model's shape is lyre.models.config's)."""

from __future__ import annotations

from dataclasses import dataclass

from lyre.engine.scheduling_policy import SchedulingPolicy
from lyre.models.config import LlamaConfig

__all__ = ["ATTENTION_BACKENDS", "EngineConfig", "gib_to_bytes"]

ATTENTION_BACKENDS = ("sdpa", "flex")
_FLEX_BLOCK = 128  # lyre.engine.attention.FLEX_BLOCK (which needs torch; the config stays plain)


@dataclass(frozen=True)
class EngineConfig:
    """Runtime capacity of one engine. Validated once; passed down whole.

    ``max_seq_len`` bounds prompt + generated tokens of one request. The
    default fits a long Orpheus utterance (about 25 s of audio at 82 tokens/s)
    and is never the model's 131072 positions. ``max_batch`` bounds the
    requests resident at once. Neither sizes the KV cache: that is one pool
    of blocks, ``kv_cache_bytes`` (or ``kv_cache_fraction`` of the device's
    free memory), by default room for ``max_batch`` requests of
    ``max_seq_len``; requests take blocks as they grow.
    """

    max_batch: int = 32
    max_seq_len: int = 2048
    max_waiting: int = 256
    device: str = "cpu"
    dtype: str | None = None  # None: float32 on CPU, bfloat16 on CUDA
    seed: int | None = None  # seeds requests that bring no seed of their own
    # How decode attention reads the KV cache: "sdpa" gathers each row's blocks, then attends (runs
    # anywhere); "flex" reads the pool in place, only each row's live blocks (compiled FlexAttention,
    # blocks of 128; opt-in until a GPU run has shown its tokens equal sdpa's). None: sdpa.
    attention: str | None = None
    # Replay decode steps from CUDA graphs captured per batch bucket (CUDA only). Opt-in until a GPU
    # run has shown their tokens equal eager decoding's.
    cuda_graphs: bool = False
    quantize: str | None = None  # "fp8": e4m3 weights with per-channel scales for the projections
    # Scheduling (lyre.engine.scheduler, lyre.engine.scheduling_policy): "deadline" orders streams by their listeners' playback
    # deadlines and parks those far ahead; "fcfs" advances every resident request every step.
    scheduler: str = "deadline"
    compute_batch: int | None = None  # rows advanced per step; None: max_batch (every resident request)
    park_above_s: float = 2.0
    unpark_below_s: float = 1.0
    # LoRA adapters (voices): resident slots (0: none), and the rank every slot is padded to (at most 64).
    max_adapters: int = 0
    lora_rank: int = 16
    adapter_max_bytes: int | None = None  # resident adapter weights at most; None: slots decide alone
    # The KV cache (lyre.engine.block_manager): positions per block (None: 64 on a CPU, where decoding reads
    # the pool block by block and bigger blocks mean fewer, larger matmuls; 16 on CUDA; 128 for flex); the pool's
    # bytes, or its share of the device's free memory once the weights are in (at most one of the two;
    # neither: room for max_batch requests of max_seq_len); reusing cached prompt prefixes.
    block_size: int | None = None
    kv_cache_bytes: int | None = None
    kv_cache_fraction: float | None = None
    prefix_caching: bool = True
    # Tokens one step may run, decode rows and prompt chunks together: a longer prompt is prefilled in
    # chunks across steps, so no step (and no playing stream) waits on a whole long prompt. None: 512, or
    # twice the rows a step decodes where that is more (see `step_tokens`).
    max_step_tokens: int | None = None
    # torch's intra-op threads in the engine's thread (lyre.common.threads); None: the process's default.
    threads: int | None = None

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
        if self.threads is not None and self.threads < 1:
            raise ValueError(f"EngineConfig.threads must be >= 1, got {self.threads!r}")
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
        self._check_kv_cache()

    def _check_kv_cache(self) -> None:
        size = self.resolved_block_size
        if not isinstance(size, int) or size < 1:
            raise ValueError(f"EngineConfig.block_size must be a positive integer, got {self.block_size!r}")
        if self.resolved_attention == "flex" and size % _FLEX_BLOCK:
            raise ValueError(f"flex attention reads whole blocks of {_FLEX_BLOCK} positions: block_size must be a "
                             f"multiple of {_FLEX_BLOCK}, got {size}")
        if self.kv_cache_bytes is not None and self.kv_cache_fraction is not None:
            raise ValueError("set the KV cache's size once: kv_cache_bytes or kv_cache_fraction, not both")
        if self.kv_cache_bytes is not None and (not isinstance(self.kv_cache_bytes, int) or self.kv_cache_bytes < 1):
            raise ValueError(f"EngineConfig.kv_cache_bytes must be a positive integer, got {self.kv_cache_bytes!r}")
        if self.kv_cache_fraction is not None and not 0 < self.kv_cache_fraction <= 1:
            raise ValueError(f"EngineConfig.kv_cache_fraction must be in (0, 1], got {self.kv_cache_fraction!r}")
        rows = self.compute_batch or self.max_batch
        if self.max_step_tokens is not None and (not isinstance(self.max_step_tokens, int)
                                                 or self.max_step_tokens <= rows):
            raise ValueError(f"EngineConfig.max_step_tokens must exceed the rows a step decodes ({rows}), or "
                             f"prompts would get no room; got {self.max_step_tokens!r}")

    @property
    def step_tokens(self) -> int:
        """The per-step token budget: as set, else 512, or twice the rows a step decodes where that is more."""
        if self.max_step_tokens is not None:
            return self.max_step_tokens
        return max(512, 2 * (self.compute_batch or self.max_batch))

    @property
    def resolved_block_size(self) -> int:
        if self.block_size is not None:
            return self.block_size
        if self.resolved_attention == "flex":
            return _FLEX_BLOCK
        return 64 if self.device == "cpu" else 16

    def kv_blocks(self, model: LlamaConfig, free_bytes: int | None = None) -> int:
        """Blocks in the KV cache's pool for ``model``; ``free_bytes``: the device's free memory, for
        ``kv_cache_fraction`` (read from the device when None). At least one request of max_seq_len."""
        size = self.resolved_block_size
        per_block = 2 * model.num_hidden_layers * model.num_key_value_heads * size * model.head_dim * _dtype_bytes(
            self.resolved_dtype)
        least = -(-self.max_seq_len // size)
        if self.kv_cache_bytes is not None:
            blocks = self.kv_cache_bytes // per_block
        elif self.kv_cache_fraction is not None:
            blocks = int(self.kv_cache_fraction * (free_bytes if free_bytes is not None else _free_bytes(self.device)))
            blocks //= per_block
        else:
            return self.max_batch * least
        if blocks < least:
            raise ValueError(f"a KV cache of {blocks} blocks of {size} positions ({blocks * per_block} bytes) cannot "
                             f"hold one request of max_seq_len {self.max_seq_len}: give it at least "
                             f"{least * per_block} bytes")
        return blocks

    def policy(self) -> SchedulingPolicy:
        return SchedulingPolicy(self.scheduler, self.compute_batch, self.park_above_s, self.unpark_below_s)

    @property
    def resolved_attention(self) -> str:
        return self.attention or "sdpa"

    @property
    def resolved_dtype(self) -> str:
        if self.dtype is not None:
            return self.dtype
        return "bfloat16" if self.device.startswith("cuda") else "float32"


def _dtype_bytes(dtype: str) -> int:
    return 4 if dtype == "float32" else 2


def _free_bytes(device: str) -> int:
    """The device's free memory now (CUDA), or the machine's available memory (CPU)."""
    if device.startswith("cuda"):
        import torch

        free, _ = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    import os

    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def gib_to_bytes(gib: float | None) -> int | None:
    """A size given in GiB (``--kv-cache-gb``) as bytes; None stays None, and so does the check: the
    engine's config names a size that is not positive."""
    if gib is None:
        return None
    if not gib > 0:
        raise ValueError(f"kv_cache_gb must be > 0, got {gib!r}")
    return int(gib * 2**30)
