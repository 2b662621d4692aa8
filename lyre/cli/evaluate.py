"""``lyre eval``: the quality gate. What a server says, and in whose voice, scored; two servers compared."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lyre.eval import Target

__all__ = ["add_parser", "reference_arg", "run"]


def reference_arg(given: str) -> tuple[str, Path]:
    """``--reference VOICE=CLIP`` as (voice, clip path)."""
    voice, sep, clip = given.partition("=")
    if not sep or not voice or not clip:
        raise argparse.ArgumentTypeError(f"expected VOICE=CLIP, got {given!r}")
    return voice, Path(clip).expanduser()


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gate = sub.add_parser(
        "eval", help="the quality gate: round-trip word error rate and speaker similarity, two servers compared",
        description="Speak a prompt set on a server with fixed seeds, transcribe it with Whisper and score it: "
                    "corpus WER (after Whisper's English normaliser), WER without the utterances over 50%, how "
                    "many those were, and each cloned voice's similarity to its reference clip. With a second "
                    "server (--compare, or a second --serve), the paired difference with a bootstrap 95% CI. "
                    "--audio-dir scores audio files against their texts with no server.")
    where = gate.add_argument_group("what to score (one of)")
    where.add_argument("url", nargs="?", help="server base URL, e.g. http://127.0.0.1:8000")
    where.add_argument("--serve", metavar="COMMAND", action="append", default=[],
                       help="start this server for the run instead ({port}: a free port), stopped once judged; "
                            "twice to compare two settings, one after the other")
    where.add_argument("--audio-dir", type=Path, metavar="DIR",
                       help="score DIR's audio files, each NAME.wav beside its NAME.txt (a subfolder is a "
                            "speaker), with no server")
    gate.add_argument("--compare", metavar="URL2", help="speak the same prompts and seeds on a second server")
    gate.add_argument("--texts", metavar="FILE_OR_SET",
                      help="texts to speak: a file of one per line, or a prompt set built with lyre bench "
                           "--build-texts (seed-tts-en) (default: lyre bench's built-in twelve)")
    gate.add_argument("--limit", type=int, metavar="N", help="only the first N texts")
    gate.add_argument("--voice", action="append", metavar="VOICE",
                      help="speak every text in this voice; repeat for more (default: tara)")
    gate.add_argument("--seeds", type=int, nargs="+", default=[0], metavar="S",
                      help="text k is spoken with seed S + k, once per S (default: 0)")
    gate.add_argument("--max-tokens", type=int, help="per utterance (default: the server's)")
    gate.add_argument("--response-format", default="pcm", help="what to ask for: pcm or wav (default: pcm)")
    gate.add_argument("--concurrency", type=int, default=4, help="utterances asked for at once (default: 4)")
    gate.add_argument("--whisper", metavar="MODEL",
                      help="transcribe here with this Whisper (a CTranslate2 folder or hub id; demo: the built-in "
                           "Whisper base) instead of each server's own speech to text (default: the server's; "
                           "with --audio-dir, demo)")
    gate.add_argument("--whisper-device", default="cpu", help="cpu or cuda[:N] for --whisper (default: cpu)")
    gate.add_argument("--language", default="en", help="what the texts are in, for Whisper (default: en)")
    gate.add_argument("--reference", type=reference_arg, action="append", default=[], metavar="VOICE=CLIP",
                      help="compare each utterance of VOICE (a voice, or an --audio-dir speaker) with this clip's "
                           "voice; repeat for more")
    gate.add_argument("--embedding", default="resemblyzer",
                      help="speaker embedding for similarity: resemblyzer or mfcc (default: resemblyzer)")
    gate.add_argument("--resamples", type=int, help="bootstrap resamples of the paired differences (default: 10000)")
    gate.add_argument("--bootstrap-seed", type=int, default=0, help="the bootstrap's seed (default: 0)")
    gate.add_argument("--max-wer", type=float, help="fail (exit 1) when a side's corpus WER is over this")
    gate.add_argument("--min-similarity", type=float, help="fail when a voice's mean similarity is under this")
    gate.add_argument("--max-wer-increase", type=float,
                      help="fail unless B's corpus WER is shown (95%% CI upper bound) to be less than this above A's")
    gate.add_argument("--save-audio", type=Path, metavar="DIR",
                      help="keep what each server said, as --audio-dir reads it (a/ and b/ when comparing)")
    gate.add_argument("--json", type=Path, metavar="PATH", help="write every figure and utterance here")
    gate.add_argument("--timeout", type=float, default=300.0, help="seconds per request (default: 300)")
    gate.add_argument("--api-key", default=os.environ.get("LYRE_API_KEY"), help="Bearer key (default: $LYRE_API_KEY)")
    gate.set_defaults(run=run)


def _targets(args: argparse.Namespace) -> list[Target]:
    from lyre.eval import Target

    if args.audio_dir is not None:
        if args.url or args.serve or args.compare:
            raise ValueError("--audio-dir scores files without a server: give no URL, --serve or --compare")
        return []
    if len([x for x in (args.url, args.serve) if x]) != 1:
        raise ValueError("give the server's URL, --serve COMMAND (once, or twice to compare), or --audio-dir DIR")
    if args.serve:
        if len(args.serve) > 2 or args.compare:
            raise ValueError("--serve takes one command, or two to compare (and no --compare)")
        return [Target(serve=command) for command in args.serve]
    return [Target(url=args.url)] + ([Target(url=args.compare)] if args.compare else [])


def run(args: argparse.Namespace) -> int:
    from lyre import eval as gate
    from lyre.bench import BUILTIN_TEXTS
    from lyre.bench.texts import named_or_file

    targets = _targets(args)
    if args.max_wer_increase is not None and len(targets) != 2:
        raise ValueError("--max-wer-increase compares two servers: give --compare URL2 or a second --serve")
    try:
        texts = named_or_file(args.texts) if args.texts else BUILTIN_TEXTS
    except OSError as exc:
        raise ValueError(f"--texts: {exc}") from None
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit must be at least 1, got {args.limit}")
        texts = texts[:args.limit]
    config = gate.EvalConfig(
        texts=tuple(texts), voices=tuple(args.voice or ("tara",)), seeds=tuple(args.seeds),
        speech=gate.SpeechSettings(args.response_format, args.max_tokens, args.concurrency),
        whisper=args.whisper, whisper_device=args.whisper_device, language=args.language,
        references=tuple(args.reference), embedding=args.embedding,
        resamples=args.resamples if args.resamples is not None else gate.RESAMPLES, bootstrap_seed=args.bootstrap_seed, api_key=args.api_key or None, timeout_s=args.timeout,
        save_audio=args.save_audio)
    if args.audio_dir is not None:
        result = asyncio.run(gate.score_folder(args.audio_dir, config))
    else:
        result = asyncio.run(gate.run_eval(targets, config))
    print(gate.format_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(gate.to_json(result), indent=1) + "\n")
    failed = gate.verdict(result, gate.Thresholds(args.max_wer, args.min_similarity, args.max_wer_increase))
    for line in failed:
        print(f"lyre: gate failed: {line}", file=sys.stderr)
    return 1 if failed else 0
