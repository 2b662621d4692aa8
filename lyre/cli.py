"""The ``lyre`` command."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import wave
from pathlib import Path

__all__ = ["main"]


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="Orpheus model folder or hub id (default: the built-in demo model)")
    p.add_argument("--codec", help="SNAC 24 kHz folder or hub id (default: the demo model's codec)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N] (default: cpu)")


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.3)
    p.add_argument("--max-tokens", type=int, default=1200)
    p.add_argument("--seed", type=int, default=None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lyre", description="Serve Orpheus TTS to real-time voice agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    say = sub.add_parser("say", help="speak text into a WAV file (or raw PCM on stdout)")
    say.add_argument("text")
    say.add_argument("--voice", default="tara")
    say.add_argument("-o", "--output", default="out.wav", help="WAV path, or - for raw 24 kHz s16le PCM on stdout")
    _add_model_args(say)
    _add_sampling_args(say)

    demo = sub.add_parser("demo-model", help="write the tiny random demo model (Orpheus + SNAC folders) to DIR")
    demo.add_argument("dir", type=Path)
    demo.add_argument("--seed", type=int, default=0)
    return parser


def _say(args: argparse.Namespace) -> int:
    from lyre import orpheus
    from lyre.engine import EngineConfig, SamplingParams
    from lyre.tts import Synthesizer

    sampling = SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    config = EngineConfig(max_batch=1, max_seq_len=max(2048, args.max_tokens + 512), device=args.device)
    synth = Synthesizer.load(args.model, args.codec, config)
    try:
        start = time.perf_counter()
        speech = asyncio.run(synth.synthesize(args.text, args.voice, sampling))
        elapsed = time.perf_counter() - start
    finally:
        synth.close()
    pcm = speech.int16().tobytes()
    if args.output == "-":
        sys.stdout.buffer.write(pcm)
        sys.stdout.buffer.flush()
    else:
        with wave.open(args.output, "wb") as out:
            out.setnchannels(1)
            out.setsampwidth(2)
            out.setframerate(orpheus.SAMPLE_RATE)
            out.writeframes(pcm)
    where = "stdout" if args.output == "-" else args.output
    print(
        f"lyre: {speech.seconds:.2f} s of audio ({speech.frames} frames, {speech.finish_reason}) "
        f"in {elapsed:.2f} s -> {where}",
        file=sys.stderr,
    )
    return 0


def _demo_model(args: argparse.Namespace) -> int:
    from lyre.demo_model import write_demo_model

    paths = write_demo_model(args.dir, seed=args.seed)
    print(f"model: {paths.model}\ncodec: {paths.codec}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"say": _say, "demo-model": _demo_model}
    try:
        return handlers[args.command](args)
    except ValueError as exc:  # bad input: say what was wrong, no traceback
        print(f"lyre: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
