"""``lyre say``: speak text into a WAV file, or raw PCM on stdout as it is made."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import wave
from pathlib import Path
from typing import TYPE_CHECKING

from lyre.models.choice import add_model_args

if TYPE_CHECKING:
    from lyre.tts import TTS, SpeechOptions

__all__ = ["add_parser", "run"]


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.3)
    p.add_argument("--max-tokens", type=int, default=None,
                   help="the most tokens each segment may generate (default: what its words need)")
    p.add_argument("--seed", type=int, default=None)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    say = sub.add_parser("say", help="speak text into a WAV file (or raw PCM on stdout)")
    say.add_argument("text")
    say.add_argument("--voice", help="a voice of the model, an OpenAI voice name, or a voice made from a reference "
                                     "clip (default: the model's first)")
    say.add_argument("--voices-dir", metavar="DIR", default=os.environ.get("LYRE_VOICES_DIR"),
                     help="where reference voices are kept, as for lyre serve (default: $LYRE_VOICES_DIR, else "
                          "the lyre cache's voices folder for the codec)")
    say.add_argument("-o", "--output", default="out.wav", help="WAV path, or - for raw 24 kHz s16le PCM on stdout")
    say.add_argument("--no-trim", action="store_true", help="keep the generated leading silence")
    add_model_args(say)
    _add_sampling_args(say)
    say.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from lyre.tts import TTS, ServingConfig, SpeechOptions, TTSConfig

    options = SpeechOptions(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    # Room for the prompt, and for a reference voice's turn (at most about 1,700 tokens) before it.
    serving = ServingConfig(device=args.device, max_streams=2, max_seq_len=(args.max_tokens or 2048) + 2048)
    config = TTSConfig(voices_dir=Path(args.voices_dir).expanduser() if args.voices_dir else None)
    tts = TTS.load(args.model, args.codec, serving, config)
    try:
        return asyncio.run(_speak(tts, args, options))
    finally:
        tts.close()


async def _speak(tts: TTS, args: argparse.Namespace, options: SpeechOptions) -> int:
    from lyre import orpheus

    to_stdout = args.output == "-"  # played as it streams; a file is made with spare capacity
    stream = tts.stream(args.text, args.voice, options, trim=not args.no_trim, streamed=to_stdout)
    sink: wave.Wave_write | None = None
    if not to_stdout:
        sink = wave.open(args.output, "wb")
        sink.setnchannels(1)
        sink.setsampwidth(2)
        sink.setframerate(orpheus.SAMPLE_RATE)
    try:
        async for chunk in stream:  # written as it is made: playback could start now
            if sink is None:
                sys.stdout.buffer.write(chunk.tobytes())
                sys.stdout.buffer.flush()
            else:
                sink.writeframes(chunk.tobytes())
    finally:
        if sink is not None:
            sink.close()
    first = "-" if stream.ttfa_s is None else f"{1000 * stream.ttfa_s:.0f} ms"
    print(
        f"lyre: {stream.audio_seconds:.2f} s of audio ({stream.frames} frames, {stream.segments} segment(s), "
        f"{stream.trimmed_ms:.0f} ms leading silence trimmed), first audio after {first}, "
        f"done in {time.perf_counter() - stream.started_at:.2f} s -> {'stdout' if to_stdout else args.output}",
        file=sys.stderr,
    )
    return 0
