"""What a loaded text-to-speech pipeline runs with: the facts behind the server's start-up summary.

Read from the loaded engine, codec and adapters rather than from the settings asked
for, so what is reported is what runs: defaults resolved, the device ``auto`` picked,
the KV cache as allocated. Settings that cost a GPU user dearly come with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lyre.models.choice import DEMO, ModelChoice, Weights
from lyre.tts.context import PipelineContext

__all__ = ["HOST_MS_PER_LAYER", "TTSFacts", "pipeline_facts"]

# Eager decoding launches every layer's kernels from Python, one step at a time: measured at
# about half a millisecond of host time per layer per step, whatever the batch. CUDA graphs
# replay a whole step in one launch instead.
HOST_MS_PER_LAYER = 0.5


@dataclass(frozen=True)
class TTSFacts:
    """How one text-to-speech pipeline runs, as loaded."""

    pipeline: str  # "lyre" (this engine) or "naive" (the transformers baseline)
    model: Weights | None  # None: handed over already built, from nowhere lyre knows
    codec: Weights | None
    device: str
    dtype: str  # the model's compute dtype
    attention: str  # the decode attention path ("sdpa", "flex"; "transformers" for the baseline)
    cuda_graphs: bool
    fp8: bool  # e4m3 projection weights
    layers: int | None  # decoder layers, where the model is at hand
    kv_slots: int | None  # streams resident at once (the engine's rows); None: no engine
    kv_positions: int | None  # positions one request may use (max_seq_len)
    kv_bytes: int | None  # the whole KV cache, keys and values
    scheduler: str
    codec_device: str
    codec_dtype: str
    codec_graphs: bool
    max_adapters: int  # LoRA voices resident at once
    lora_rank: int | None  # the rank every adapter slot holds; None: no slots
    adapters: tuple[str, ...]  # adapters resident now
    cuda_available: bool  # whether torch sees a CUDA device on this machine
    kv_blocks: int | None = None  # blocks in the KV cache's pool, shared by every stream; None: no block cache
    block_size: int | None = None  # positions per block

    @property
    def on_cuda(self) -> bool:
        return self.device.startswith("cuda")

    @property
    def warnings(self) -> tuple[str, ...]:
        """One line per setting known to cost dearly, most costly first."""
        out = []
        random = [kind for kind, w in (("model", self.model), ("codec", self.codec)) if w is not None and w.random]
        if random:
            hint = "; name a real model with --model" if self.model is not None and self.model.name == DEMO else ""
            out.append(f"random weights ({' and '.join(random)}): the audio is noise, not speech{hint}")
        if not self.on_cuda and self.cuda_available:
            out.append("the model runs on the CPU although torch sees a CUDA device; --device auto takes the GPU")
        if self.on_cuda and self.pipeline == "lyre":
            if not self.cuda_graphs:
                per_step = f" (~{HOST_MS_PER_LAYER * self.layers:.0f} ms a step)" if self.layers else ""
                out.append(f"CUDA graphs off: eager decoding is host-bound, about {HOST_MS_PER_LAYER} ms of host "
                           f"time per layer per step{per_step}, whatever the batch; --cuda-graphs replays steps")
        if self.on_cuda and self.pipeline == "lyre" and self.attention == "sdpa":
            what = ("each row's blocks up to its step's context bucket (up to twice the longest row's context)"
                    if self.cuda_graphs else "each row's blocks up to its context")
            out.append(f"attention sdpa copies {what} of K and V, every layer, every step, before attending; "
                       "--attention flex reads the blocks in place (opt-in until a GPU run confirms its tokens)")
        if self.on_cuda and self.dtype == "float32":
            out.append("the model runs in float32 on CUDA: twice the memory and bandwidth of bfloat16")
        return tuple(out)

    def as_json(self) -> dict[str, Any]:
        """Every fact as JSON values, the warnings included."""
        facts = {name: getattr(self, name) for name in self.__dataclass_fields__}
        facts["model"] = None if self.model is None else self.model.as_json()
        facts["codec"] = None if self.codec is None else self.codec.as_json()
        facts["adapters"] = list(self.adapters)
        facts["warnings"] = list(self.warnings)
        return facts


def pipeline_facts(context: PipelineContext, source: ModelChoice | None) -> TTSFacts:
    """The facts of lyre's pipeline, read from its engine, codec service and adapters; ``source``: where
    the model and codec came from (None: not known)."""
    config = context.engine.config
    runner = context.engine.runner
    model = getattr(runner, "model", None)  # a stand-in runner (benchmarks, tests) has no model
    decoder = context.codec.decoder
    adapters = context.adapters
    resident = tuple(a["name"] for a in adapters.listing() if a["resident"]) if adapters else ()
    return TTSFacts(
        pipeline="lyre",
        model=source.model if source else None,
        codec=source.codec if source else None,
        device=config.device,
        dtype=config.resolved_dtype,
        attention=config.resolved_attention,
        cuda_graphs=config.cuda_graphs,
        fp8=config.quantize == "fp8",
        layers=model.config.num_hidden_layers if model is not None else None,
        kv_slots=config.max_batch,
        kv_positions=config.max_seq_len,
        kv_bytes=runner.kv_cache_bytes,
        kv_blocks=runner.kv_blocks,
        block_size=runner.block_size,
        scheduler=config.scheduler,
        codec_device=str(decoder.device),
        codec_dtype=decoder.dtype,
        codec_graphs=context.codec.cuda_graphs,
        max_adapters=config.max_adapters,
        lora_rank=config.lora_rank if config.max_adapters else None,
        adapters=resident,
        cuda_available=torch.cuda.is_available(),
    )
