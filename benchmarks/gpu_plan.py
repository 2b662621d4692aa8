"""What one run of benchmarks/gpu.py does: where, how big, which levers, the sweeps, and the quality check.

Used by benchmarks/gpu.py (and its modules); `parse` reads its command line.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from gpu_levers import Lever

from lyre.cli.evaluate import reference_arg

__all__ = ["REFERENCE", "Plan", "parse"]

REFERENCE = Lever("sdpa", "eager", False)  # what every other lever set's tokens (and speech) must agree with

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    """What one run does: where, how big, which levers, and the sweeps."""

    small: bool
    device: str
    batches: tuple[int, ...]
    contexts: tuple[int, ...]
    levers: tuple[Lever, ...]
    steps: int
    agreement_steps: int  # greedy decode steps after the prefill, per lever pair (`gpu_agreement`)
    codec_batches: tuple[int, ...]
    levels: tuple[int, ...]
    requests: int
    duration_s: float
    warmup: int
    max_tokens: int
    max_seq_len: int
    timeout_s: float
    seed: int | None
    out: Path
    # The open-loop sweep (`gpu_field`): requests arriving at each rate, the first warmup s of each excluded.
    rates: tuple[float, ...] = ()
    rate_duration_s: float = 15.0
    rate_warmup_s: int = 2
    # Real weights (`gpu_quality`): None times random weights and leaves WER and similarity out.
    model: Path | None = None
    codec: Path | None = None
    whisper: str = "demo"  # the judge, loaded on the run's device (demo: Whisper base)
    quality_texts: int = 12  # of lyre bench's built-in texts, each lever set against REFERENCE
    references: tuple[tuple[str, Path], ...] = ()  # (voice, clip) for speaker similarity


def _levers(small: bool) -> tuple[Lever, ...]:
    if small:  # every code path once, not every combination: fp8 matmuls are slow, flex compiles slowly on a CPU
        return (REFERENCE, Lever("sdpa", "fixed", False), Lever("sdpa", "eager", True))
    return tuple(Lever(a, m, fp8) for fp8 in (False, True) for a in ("sdpa", "flex") for m in ("eager", "graphs"))


def parse(argv: list[str] | None, description: str) -> Plan:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--small", action="store_true", help="CPU, tiny demo model, small grids: a smoke run")
    p.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                   help="served concurrency levels (default: 16 64 128 256 384; --small: 1 2)")
    p.add_argument("--rates", type=float, nargs="+", metavar="R",
                   help="open-loop request rates per second, the field's table (default: 8 32 64; --small: 2)")
    p.add_argument("--batches", type=int, nargs="+", help="decode batches timed (default: 1 16 64 256)")
    p.add_argument("--contexts", type=int, nargs="+", help="keys per row timed (default: 128 512 2048)")
    p.add_argument("--requests", type=int, help="measured requests per level at most (default: 512; --small: 2)")
    p.add_argument("--duration", type=float, help="seconds of measured load per level at most (default: 20)")
    p.add_argument("--warmup", type=int, help="warm-up requests per stream at each level (default: 1; --small: 0)")
    p.add_argument("--max-tokens", type=int, help="per request (default: 280, about 3.4 s of audio; --small: 28)")
    p.add_argument("--max-seq-len", type=int, default=512, help="KV positions per served stream (default: 512)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    p.add_argument("--seed", type=int, default=0, help="request k gets seed + k (default: 0)")
    p.add_argument("--model", type=Path, help="a real Orpheus folder: serve it, and judge each lever set's speech "
                                             "(WER, similarity) against sdpa's eager bf16 with lyre eval")
    p.add_argument("--codec", type=Path, help="the SNAC folder beside --model")
    p.add_argument("--whisper", default="demo", help="the judge with --model: a CTranslate2 Whisper folder "
                                                    "(default: demo, the built-in Whisper base)")
    p.add_argument("--quality-texts", type=int, default=12, help="texts each lever set speaks with --model "
                                                                 "(default: 12)")
    p.add_argument("--reference", type=reference_arg, action="append", default=[], metavar="VOICE=CLIP",
                   help="with --model: each lever set's VOICE compared with this clip's voice")
    p.add_argument("--out", type=Path, help="results folder (default: $OUT, else ./gpu-bench-out)")
    args = p.parse_args(argv)
    small = args.small
    if (args.model is None) != (args.codec is None):
        p.error("--model and --codec go together")

    def pick(value: T | None, full: T, tiny: T) -> T:
        return value if value is not None else (tiny if small else full)

    return Plan(
        small=small,
        device="cpu" if small else "cuda",
        batches=tuple(pick(args.batches, [1, 16, 64, 256], [1, 4])),
        contexts=tuple(pick(args.contexts, [128, 512, 2048], [128])),
        levers=_levers(small),
        steps=pick(None, 10, 2),
        agreement_steps=pick(None, 24, 8),
        codec_batches=pick(None, (1, 8, 32, 64), (1,)),
        levels=tuple(pick(args.concurrency, [16, 64, 128, 256, 384], [1, 2])),
        requests=pick(args.requests, 512, 2),
        duration_s=pick(args.duration, 20.0, 10.0),
        warmup=pick(args.warmup, 1, 0),
        max_tokens=pick(args.max_tokens, 280, 28),
        max_seq_len=args.max_seq_len,
        timeout_s=args.timeout,
        seed=args.seed,
        out=args.out or Path(os.environ.get("OUT") or "gpu-bench-out"),
        rates=tuple(pick(args.rates, [8.0, 32.0, 64.0], [2.0])),
        rate_duration_s=pick(None, 15.0, 5.0),
        rate_warmup_s=pick(None, 2, 0),
        model=args.model,
        codec=args.codec,
        whisper=args.whisper,
        quality_texts=args.quality_texts,
        references=tuple(args.reference),
    )
