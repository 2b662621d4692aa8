"""Training step time for benchmarks/gpu.py: train-voice's LoRA defaults on Orpheus-3B's shape (bf16, random weights).

Sequences are synthetic but laid out as train-voice lays them out (a prompt,
5 s of audio tokens, the end tokens), so the step costs what a real clip's
step costs. ``small`` runs one tiny step on the demo model on the CPU.
"""

from __future__ import annotations

import copy
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from lyre import orpheus
from lyre.models.demo import DEMO_LLAMA_CONFIG
from lyre.train.prepare import Clip, training_ids
from lyre.train.trainer import TrainConfig, Trainer, with_lora

__all__ = ["train_step_figures"]

# DESIGN.md section 2, as a transformers config.
ORPHEUS_3B_HF = DEMO_LLAMA_CONFIG | {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
                                     "num_attention_heads": 24, "num_key_value_heads": 8, "head_dim": 128}
_PROMPT = [orpheus.START_OF_HUMAN, orpheus.BOS, *range(1000, 1012), orpheus.EOT, orpheus.END_OF_HUMAN,
           orpheus.START_OF_AI, orpheus.START_OF_SPEECH]


def _clips(n: int, frames: int, seed: int = 0) -> list[Clip]:
    g = torch.Generator().manual_seed(seed)
    clips = []
    for i in range(n):
        codes = torch.randint(0, orpheus.CODEBOOK_SIZE, (frames, orpheus.FRAME_TOKENS), generator=g).tolist()
        ids = training_ids(_PROMPT, [tuple(frame) for frame in codes])
        clips.append(Clip(f"synthetic{i}", ids, len(_PROMPT), frames * orpheus.FRAME_SECONDS, 0.0, 0.0))
    return clips


def train_step_figures(small: bool, device: str, log: Callable[[str], None]) -> dict:
    """Seconds per optimizer step at train-voice's defaults, and the peak GPU memory of training."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = TrainConfig(steps=2 if small else 6, device=device, val_share=0.0, checkpoint_every=10**6)
    frames = 4 if small else 59  # 5 s of audio: about 430 tokens with the prompt
    dtype = torch.float32 if small else torch.bfloat16
    spec = DEMO_LLAMA_CONFIG if small else ORPHEUS_3B_HF
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            # A deep copy: transformers edits the nested rope_scaling dict in place.
            base = LlamaForCausalLM(LlamaConfig(**copy.deepcopy({k: v for k, v in spec.items() if k != "torch_dtype"})))
    finally:
        torch.set_default_dtype(previous)
    model = with_lora(base, config)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    times: list[float] = []
    last = [0.0]

    def tick(step: int, loss: float) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    with tempfile.TemporaryDirectory() as work:
        trainer = Trainer(model, _clips(config.batch_size * 2, frames), config, Path(work), "synthetic")
        last[0] = time.perf_counter()
        trainer.run(show_progress=False, on_step=tick)  # each step ends in a host read of its loss: synchronised
    steady = times[1:] or times
    figures = {"batch_size": config.batch_size, "rank": config.rank, "sequence_tokens": len(_clips(1, frames)[0].ids),
               "dtype": str(dtype).removeprefix("torch."), "step_s": round(statistics.median(steady), 4),
               "steps_timed": len(steady),
               "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if device.startswith("cuda")
               else None}
    log(f"training step (LoRA r{config.rank}, batch {config.batch_size} x {figures['sequence_tokens']} tokens, "
        f"{figures['dtype']}): {1000 * figures['step_s']:.0f} ms, peak memory {figures['peak_memory_gib']} GiB")
    return figures
