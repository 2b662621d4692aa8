"""LoRA training on a transformers LlamaForCausalLM with peft: the loop, validation and resumable state.

Each optimizer step takes ``grad_accum`` micro-batches of ``batch_size``
sequences. Which clips make micro-batch m is a pure function of the seed and
m (one shuffle per epoch), and the random generators are checkpointed with
the weights, so a run resumed from step k finishes with the very weights an
uninterrupted run makes.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from lyre.models.peft_folder import LORA_TARGETS, MAX_LORA_RANK
from lyre.orpheus import PAD
from lyre.train.checkpoint import latest_checkpoint, save_checkpoint
from lyre.train.prepare import Clip

__all__ = ["TrainConfig", "TrainError", "TrainResult", "Trainer", "with_lora"]

_IGNORE = -100  # label of a position the loss skips


class TrainError(ValueError):
    """Training cannot start or go on as asked; the message says why."""


@dataclass(frozen=True)
class TrainConfig:
    """LoRA shape, optimisation and run settings. ``steps`` (optimizer steps), when set, overrides ``epochs``."""

    rank: int = 16
    alpha: float = 32.0
    dropout: float = 0.05
    targets: tuple[str, ...] = tuple(LORA_TARGETS)
    learning_rate: float = 2e-4
    epochs: int = 5
    steps: int | None = None
    batch_size: int = 4
    grad_accum: int = 1
    warmup_steps: int = 10
    seed: int = 0
    val_share: float = 0.1
    checkpoint_every: int = 25
    device: str = "cpu"

    def __post_init__(self) -> None:
        if not 1 <= self.rank <= MAX_LORA_RANK:
            raise ValueError(f"rank must be in [1, {MAX_LORA_RANK}] (the most lyre serves), got {self.rank}")
        unknown = sorted(set(self.targets) - set(LORA_TARGETS))
        if unknown or not self.targets:
            raise ValueError(f"targets must be among {', '.join(LORA_TARGETS)}, got {', '.join(self.targets)}")
        checks = {"alpha": self.alpha > 0, "dropout": 0 <= self.dropout < 1, "learning_rate": self.learning_rate > 0,
                  "epochs": self.epochs >= 1, "steps": self.steps is None or self.steps >= 1,
                  "batch_size": self.batch_size >= 1, "grad_accum": self.grad_accum >= 1,
                  "warmup_steps": self.warmup_steps >= 0, "val_share": 0 <= self.val_share < 1,
                  "checkpoint_every": self.checkpoint_every >= 1}
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise ValueError(", ".join(f"{name} {getattr(self, name)!r} is out of range" for name in bad))

    def fingerprint(self) -> dict[str, Any]:
        """The settings a resumed run must share with the one it resumes (where and how often it saves aside)."""
        spec = asdict(self)
        for free in ("checkpoint_every", "device"):
            spec.pop(free)
        spec["targets"] = list(spec["targets"])
        return spec


@dataclass
class TrainResult:
    steps: int
    resumed_from: int  # 0 for a fresh run
    train_loss: float  # mean over the last step's tokens
    val_loss: float | None  # on the held-out clips, after the last step
    base_val_loss: float | None  # the same before any training
    train_clips: int
    val_clips: int
    seconds: float  # this invocation's training loop
    history: list[dict[str, float]] = field(default_factory=list)


def with_lora(base: Any, config: TrainConfig) -> Any:
    """``base`` (a transformers causal LM) wrapped by peft in a fresh LoRA of ``config``'s shape."""
    from peft import LoraConfig, get_peft_model

    base.config.use_cache = False
    torch.manual_seed(config.seed)  # the LoRA A matrices' initialisation
    lora = LoraConfig(r=config.rank, lora_alpha=config.alpha, lora_dropout=config.dropout,
                      target_modules=list(config.targets), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(base, lora)


def split(clips: list[Clip], share: float, seed: int) -> tuple[list[Clip], list[Clip]]:
    """(train, validation): a seeded share of the clips held out, at least one when any is asked for."""
    order = np.random.default_rng(seed).permutation(len(clips))
    n_val = 0 if share == 0 or len(clips) < 2 else min(len(clips) - 1, max(1, round(share * len(clips))))
    return [clips[i] for i in order[n_val:]], [clips[i] for i in order[:n_val]]


def _collate(clips: list[Clip], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels, each (B, T)."""
    width = max(len(c.ids) for c in clips)
    ids = torch.full((len(clips), width), PAD, dtype=torch.long)
    labels = torch.full((len(clips), width), _IGNORE, dtype=torch.long)
    mask = torch.zeros((len(clips), width), dtype=torch.long)
    for row, clip in enumerate(clips):
        n = len(clip.ids)
        ids[row, :n] = torch.tensor(clip.ids)
        labels[row, clip.prompt_len:n] = ids[row, clip.prompt_len:n]
        mask[row, :n] = 1
    return ids.to(device), mask.to(device), labels.to(device)


class Trainer:
    """One training run of a LoRA on ``model`` (a peft model) over prepared clips."""

    def __init__(self, model: Any, clips: list[Clip], config: TrainConfig, work: Path, dataset_key: str) -> None:
        self.model = model
        self.config = config
        self.work = work
        self.device = torch.device(config.device)
        self.train_clips, self.val_clips = split(clips, config.val_share, config.seed)
        self.fingerprint = {"dataset": dataset_key, **config.fingerprint()}
        self.batches_per_epoch = math.ceil(len(self.train_clips) / config.batch_size)
        self.total_steps = config.steps or math.ceil(config.epochs * self.batches_per_epoch / config.grad_accum)
        self.steps_per_epoch = max(1, math.ceil(self.batches_per_epoch / config.grad_accum))
        params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=0.0)
        warm = min(config.warmup_steps, self.total_steps)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,  # linear warm-up, then linear decay to zero at the last step
            lambda s: (s + 1) / warm if s < warm else max(0.0, (self.total_steps - s) / max(1, self.total_steps - warm)))

    def _micro_batch(self, m: int) -> list[Clip]:
        epoch, b = divmod(m, self.batches_per_epoch)
        order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.train_clips))
        size = self.config.batch_size
        return [self.train_clips[i] for i in order[b * size:(b + 1) * size]]

    def _loss_sum(self, clips: list[Clip]) -> tuple[torch.Tensor, int]:
        """Summed cross-entropy over the labelled tokens of ``clips``, and how many there were."""
        ids, mask, labels = _collate(clips, self.device)
        causal = self.model.get_base_model()  # the LlamaForCausalLM, its projections LoRA-wrapped in place
        hidden = causal.model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, T, H)
        targets = labels[:, 1:]  # position t predicts token t + 1
        keep = targets != _IGNORE
        # The vocabulary projection only where the loss is taken: the prompt's logits are never needed.
        logits = causal.lm_head(hidden[:, :-1][keep]).float()  # (N, vocab)
        return F.cross_entropy(logits, targets[keep], reduction="sum"), int(keep.sum())

    @torch.no_grad()
    def validation_loss(self) -> float | None:
        if not self.val_clips:
            return None
        self.model.eval()
        total, count = 0.0, 0
        for i in range(0, len(self.val_clips), self.config.batch_size):
            loss, n = self._loss_sum(self.val_clips[i:i + self.config.batch_size])
            total, count = total + float(loss), count + n
        self.model.train()
        return total / count

    def _step(self, step: int) -> float:
        accum = self.config.grad_accum
        batches = [self._micro_batch(step * accum + j) for j in range(accum)]
        tokens = sum(len(c.ids) - c.prompt_len for batch in batches for c in batch)
        total = 0.0
        for batch in batches:
            loss, _ = self._loss_sum(batch)
            (loss / tokens).backward()  # every token of the step weighs the same
            total += float(loss.detach())
        norm = torch.nn.utils.clip_grad_norm_([p for p in self.model.parameters() if p.requires_grad], 1.0)
        # Checked before the weights move: a NaN step would leave NaN weights for every later step (and voice).
        if not math.isfinite(total) or not math.isfinite(float(norm)):
            what = (f"loss became {total / tokens}" if not math.isfinite(total)
                    else f"gradient norm became {float(norm)}")
            raise TrainError(f"training diverged: the {what} at step {step + 1}; nothing was written to the "
                             f"adapter folder. Lower --lr (now {self.config.learning_rate:g}) and start over "
                             f"(delete {self.work} first)")
        self.optimizer.step()
        self.schedule.step()
        self.optimizer.zero_grad(set_to_none=True)
        return total / tokens

    def _state(self, step: int, history: list[dict[str, float]], base_val: float | None) -> dict[str, Any]:
        state = {"step": step, "fingerprint": json.dumps(self.fingerprint, sort_keys=True),
                 "optimizer": self.optimizer.state_dict(), "schedule": self.schedule.state_dict(),
                 "cpu_rng": torch.get_rng_state(), "history": json.dumps(history), "base_val": base_val}
        if self.device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return state

    def _resume(self) -> tuple[int, list[dict[str, float]], float | None]:
        from peft import set_peft_model_state_dict

        checkpoint = latest_checkpoint(self.work)
        if checkpoint is None:
            print(f"lyre: --resume: no checkpoint in {self.work}; starting from step 0", file=sys.stderr)
            return 0, [], self.validation_loss()
        state = checkpoint.state()
        theirs = json.loads(state["fingerprint"])
        if theirs != self.fingerprint:
            differ = sorted(k for k in set(theirs) | set(self.fingerprint) if theirs.get(k) != self.fingerprint.get(k))
            raise TrainError(f"the checkpoint in {checkpoint.path} was made with other settings "
                             f"({', '.join(differ)} differ); rerun with the same ones, or delete {self.work} "
                             "to start over")
        set_peft_model_state_dict(self.model, {k: v.to(self.device) for k, v in checkpoint.adapter().items()})
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        torch.set_rng_state(state["cpu_rng"])
        if "cuda_rng" in state and self.device.type == "cuda":
            torch.cuda.set_rng_state(state["cuda_rng"], self.device)
        return state["step"], json.loads(state["history"]), state["base_val"]

    def run(self, resume: bool = False, show_progress: bool = True,
            on_step: Callable[[int, float], None] | None = None) -> TrainResult:
        """Train to ``total_steps``, from the last checkpoint with ``resume``; ``on_step(step, loss)`` after each."""
        from peft import get_peft_model_state_dict
        from tqdm import tqdm

        existing = latest_checkpoint(self.work)
        if existing is not None and not resume:
            raise TrainError(f"an interrupted run left a checkpoint at step {existing.step} in {self.work}; "
                             "pass --resume to continue it, or delete that folder to start over")
        self.model.train()
        if resume:
            start, history, base_val = self._resume()
        else:
            start, history, base_val = 0, [], self.validation_loss()
        loss, val = math.nan, base_val
        began = time.perf_counter()
        bar = tqdm(total=self.total_steps, initial=start, unit="step", file=sys.stderr, disable=not show_progress,
                   desc="training", dynamic_ncols=True)
        try:
            for step in range(start, self.total_steps):
                loss = self._step(step)
                done = step + 1
                record = {"step": done, "loss": loss}
                if done % self.steps_per_epoch == 0 or done == self.total_steps:
                    val = self.validation_loss()
                    if val is not None:
                        record["val_loss"] = val
                history.append(record)
                bar.set_postfix(loss=f"{loss:.3f}", val="-" if val is None else f"{val:.3f}", refresh=False)
                bar.update(1)
                if done % self.config.checkpoint_every == 0 and done < self.total_steps:
                    save_checkpoint(self.work, done, get_peft_model_state_dict(self.model),
                                    self._state(done, history, base_val))
                if on_step is not None:
                    on_step(done, loss)
        finally:
            bar.close()
        return TrainResult(self.total_steps, start, loss, val, base_val, len(self.train_clips), len(self.val_clips),
                           time.perf_counter() - began, history)
