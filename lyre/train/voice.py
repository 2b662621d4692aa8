"""`lyre train-voice`: a dataset folder in, a LoRA adapter folder that `lyre serve --adapter` serves out.

The adapter folder holds what peft saves (adapter_config.json,
adapter_model.safetensors) and ``lyre_voice.json``: the speaker name the
prompts were trained with, the base model, the dataset and training summary.
It is built in a temporary sibling and renamed into place once complete.
Beside it, ``<ADAPTER_DIR>.train/`` keeps the prepared dataset (a rerun skips
encoding) and, while a run is under way, its latest checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from lyre.codec.encoder import SnacEncoder
from lyre.codec.snac import load_snac
from lyre.models.peft_folder import VOICE_FILE
from lyre.models.choice import CODEC_FILES, choose_weights
from lyre.models.folder import load_tokenizer
from lyre.train.checkpoint import publish_folder, remove_checkpoints
from lyre.train.dataset import read_dataset
from lyre.train.prepare import DataConfig, PreparedDataset, prepare_dataset
from lyre.train.trainer import TrainConfig, Trainer, TrainError, TrainResult, with_lora

__all__ = ["VoiceJob", "prepare_voice_data", "train_voice", "work_folder"]


@dataclass(frozen=True)
class VoiceJob:
    """What to train and where: the dataset, the adapter folder, and the model and codec it is for."""

    data: Path
    out: Path
    data_config: DataConfig
    train_config: TrainConfig = TrainConfig()
    model: str | None = None  # folder or hub id; None: the demo model
    codec: str | None = None  # folder or hub id; None: the codec the model needs (lyre.models.choice)
    overwrite: bool = False


def work_folder(out: Path) -> Path:
    """Where the prepared dataset and checkpoints of the adapter ``out`` live: beside it."""
    return out.parent / f"{out.name}.train"


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for path in files:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return h.hexdigest()[:16]


def prepare_voice_data(job: VoiceJob, encoder: Callable[[], SnacEncoder] | None = None,
                       ) -> tuple[PreparedDataset, Path]:
    """The job's dataset, prepared (or read from the cache beside the output); and the model folder.

    ``encoder`` makes the encoder when one is needed (default: the job's codec, loaded on first use).
    """
    source = choose_weights(job.model, job.codec)
    model_folder, codec_folder = source.model.local(), source.codec.local()
    listing = read_dataset(job.data)
    tokenizer = load_tokenizer(model_folder)
    identity = _digest(*(codec_folder / f for f in CODEC_FILES), model_folder / "tokenizer.json")
    loaded: list[SnacEncoder] = []

    def load_encoder() -> SnacEncoder:
        if not loaded:
            loaded.append(encoder() if encoder is not None else SnacEncoder(load_snac(codec_folder, job.train_config.device)))
        return loaded[0]

    prepared = prepare_dataset(listing, job.data_config, tokenizer, load_encoder, identity, work_folder(job.out))
    return prepared, model_folder


def _load_model(model_folder: Path, config: TrainConfig) -> Any:
    from transformers import LlamaForCausalLM

    device = torch.device(config.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    return with_lora(LlamaForCausalLM.from_pretrained(model_folder, dtype=dtype).to(device), config)


def _voice_file(job: VoiceJob, model_folder: Path, prepared: PreparedDataset, result: TrainResult) -> dict:
    training = {k: v for k, v in asdict(job.train_config).items() if k not in ("checkpoint_every", "device")}
    training |= {"steps_run": result.steps, "train_clips": result.train_clips, "validation_clips": result.val_clips,
                 "final_train_loss": round(result.train_loss, 4),
                 "validation_loss": None if result.val_loss is None else round(result.val_loss, 4),
                 "base_validation_loss": None if result.base_val_loss is None else round(result.base_val_loss, 4)}
    silence = asdict(job.data_config.silence)
    return {"speaker": job.data_config.voice, "base_model": job.model or str(model_folder),
            "dataset": prepared.summary() | {"silence": silence}, "training": training}


def train_voice(job: VoiceJob, resume: bool = False, show_progress: bool = True,
                on_step: Callable[[int, float], None] | None = None, log: Callable[[str], None] | None = None,
                ) -> TrainResult:
    """Prepare the data, train, and put the complete adapter at ``job.out``.

    Nothing is written to ``job.out`` before the adapter is complete; an
    interrupted run leaves its checkpoint in `work_folder` for ``resume``.
    """
    say = log or (lambda line: print(line, file=sys.stderr))
    out = job.out.expanduser()
    if torch.device(job.train_config.device).type == "cuda" and not torch.cuda.is_available():
        raise TrainError(f"--device {job.train_config.device}: CUDA is not available on this machine")
    if out.exists() and not job.overwrite:
        raise TrainError(f"'{out}' already exists; pass --overwrite to replace it once the new adapter is complete")
    prepared, model_folder = prepare_voice_data(job)
    say(prepared.report())
    model = _load_model(model_folder, job.train_config)
    trainer = Trainer(model, prepared.clips, job.train_config, work_folder(out), prepared.key)
    say(f"training {trainer.total_steps} steps on {len(trainer.train_clips)} clips "
        f"({len(trainer.val_clips)} held out for validation) on {job.train_config.device}")
    result = trainer.run(resume, show_progress, on_step)
    voice = _voice_file(job, model_folder, prepared, result)

    def write(folder: Path) -> None:
        model.save_pretrained(folder)
        (folder / VOICE_FILE).write_text(json.dumps(voice, indent=2) + "\n")

    publish_folder(out, write, replace=job.overwrite)
    remove_checkpoints(work_folder(out))
    val = "-" if result.val_loss is None else f"{result.val_loss:.3f}"
    base = "-" if result.base_val_loss is None else f"{result.base_val_loss:.3f}"
    say(f"voice {job.data_config.voice!r} written to {out}: train loss {result.train_loss:.3f}, "
        f"validation loss {val} (base model {base})")
    return result
