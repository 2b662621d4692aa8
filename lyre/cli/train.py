"""``lyre train-voice``: clone a voice from a dataset folder into a LoRA adapter."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lyre.models.choice import add_model_args

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    train = sub.add_parser(
        "train-voice", help="clone a voice from a dataset folder into a LoRA adapter that serve --adapter serves",
        description="Train a LoRA adapter on DATA: an LJSpeech-style folder (metadata.csv with id|text or "
                    "id|text|normalized_text, audio in wavs/<id>.wav) or a manifest.jsonl of "
                    '{"audio": path, "text": ...}. Leading silence is cut from every clip so the voice starts '
                    "speaking at once.")
    train.add_argument("data", type=Path, help="the dataset folder")
    train.add_argument("--out", type=Path, required=True, help="the adapter folder to write (ADAPTER_DIR)")
    train.add_argument("--voice", required=True, help="the speaker name the voice's prompts carry")
    add_model_args(train)
    steps = train.add_argument_group("training")
    steps.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (default: 2e-4)")
    steps.add_argument("--epochs", type=int, default=5, help="passes over the clips (default: 5)")
    steps.add_argument("--steps", type=int, help="optimizer steps, instead of --epochs")
    steps.add_argument("--batch-size", type=int, default=4, help="clips per micro-batch (default: 4)")
    steps.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default: 1)")
    steps.add_argument("--warmup-steps", type=int, default=10, help="linear warm-up, then linear decay (default: 10)")
    steps.add_argument("--seed", type=int, default=0)
    steps.add_argument("--val-share", type=float, default=0.1,
                     help="share of clips held out for a validation loss (default: 0.1; 0: none)")
    steps.add_argument("--rank", type=int, default=16, help="LoRA rank (default: 16)")
    steps.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha (default: 32)")
    steps.add_argument("--dropout", type=float, default=0.05, help="LoRA dropout (default: 0.05)")
    steps.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints (default: 25)")
    steps.add_argument("--resume", action="store_true", help="continue an interrupted run from its last checkpoint")
    steps.add_argument("--overwrite", action="store_true", help="replace ADAPTER_DIR once the new adapter is complete")
    steps.add_argument("--no-progress", action="store_true", help="no progress bar")
    data = train.add_argument_group("data preparation")
    data.add_argument("--keep-leading-silence", action="store_true",
                      help="train on the clips' leading silence as it is (the voice will learn to open with it)")
    data.add_argument("--silence-db", type=float, default=-40.0,
                      help="RMS of a 10 ms block, in dBFS, at which it counts as speech (default: -40)")
    data.add_argument("--lead-pad-ms", type=float, default=50.0, help="silence kept before speech (default: 50)")
    data.add_argument("--tail-pad-ms", type=float, default=100.0, help="silence kept after speech (default: 100)")
    data.add_argument("--min-seconds", type=float, default=0.5, help="shorter clips are skipped (default: 0.5)")
    data.add_argument("--max-seq-len", type=int, default=2048,
                      help="longest sequence, prompt and audio tokens together; longer clips are skipped "
                           "(default: 2048, serve's --max-seq-len)")
    train.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre.train import DataConfig, SilenceCut, TrainConfig, VoiceJob, train_voice

    silence = SilenceCut(cut_leading=not args.keep_leading_silence, threshold_dbfs=args.silence_db,
                         lead_pad_ms=args.lead_pad_ms, tail_pad_ms=args.tail_pad_ms)
    job = VoiceJob(
        data=args.data,
        out=args.out,
        data_config=DataConfig(args.voice, silence, args.min_seconds, args.max_seq_len),
        train_config=TrainConfig(rank=args.rank, alpha=args.alpha, dropout=args.dropout, learning_rate=args.lr,
                                 epochs=args.epochs, steps=args.steps, batch_size=args.batch_size,
                                 grad_accum=args.grad_accum, warmup_steps=args.warmup_steps, seed=args.seed,
                                 val_share=args.val_share, checkpoint_every=args.checkpoint_every,
                                 device=args.device),
        model=args.model,
        codec=args.codec,
        overwrite=args.overwrite,
    )
    try:
        train_voice(job, resume=args.resume, show_progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"lyre: interrupted; nothing was written to {args.out}. Rerun with --resume to continue from the "
              "last checkpoint", file=sys.stderr)
        return 130
    return 0
