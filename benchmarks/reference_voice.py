"""Voices from a reference clip: what making one costs, and what speaking one adds to the time to first audio.

``encode``: a clip of ``--clip-seconds`` of espeak-ng speech read, cut and
SNAC-encoded as ``POST /v1/audio/voices`` does it (the demo codec has the
real SNAC's architecture, so the work is the real work).

``ttfa``: one stream at a time on the demo model in this process, each
asking for ``--frames`` frames; the time from the request to its first audio
(p50 of ``--requests``) for a model voice, and for a reference voice whose
turn is as long as ``--clip-seconds`` of real speech encodes to (the demo's
random codec repeats its coarse codes, so its own clips would give a few
frames: the turn is built from varied frames of the real length instead).
The reference voice is measured with prefix caching (its first request
prefills the turn, every later one finds it cached) and without (every
request prefills it).

    .venv/bin/python benchmarks/reference_voice.py
    .venv/bin/python benchmarks/reference_voice.py --clip-seconds 20 --requests 9 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from lyre import orpheus
from lyre.tts import TTS, ServingConfig, SpeechOptions, TTSConfig
from lyre.tts.clips import SilenceCut, TrimmedClip, load_clip, trim_clip
from lyre.tts.reference_voices import ReferenceVoice

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' espeak-ng sentences
from speech import SENTENCES, speak_wav  # noqa: E402

SAID = " ".join(SENTENCES[:4])
# Real SNAC frames for speech: a frame every 85 ms, a few dropped as repeats of the one before.
KEPT_SHARE = 0.9


def encode(tts: TTS, seconds: float) -> dict[str, float]:
    text = SAID
    pcm = trim_clip(load_clip(speak_wav(text)), SilenceCut()).pcm
    while len(pcm) < seconds * orpheus.SAMPLE_RATE:
        text += " " + SAID
        pcm = trim_clip(load_clip(speak_wav(text)), SilenceCut()).pcm
    clip = TrimmedClip(pcm[:int(seconds * orpheus.SAMPLE_RATE)], 0.0, 0.0)
    tts.make_reference("warm", clip, SAID)  # the encoder's first call pays for its set-up
    start = time.perf_counter()
    voice = tts.make_reference("timed", clip, SAID)
    took = time.perf_counter() - start
    return {"clip_s": round(clip.seconds, 2), "encode_s": round(took, 3),
            "realtime_factor": round(took / clip.seconds, 3), "frames_kept": len(voice.frames)}


def synthetic_voice(seconds: float) -> ReferenceVoice:
    frames = int(seconds / orpheus.FRAME_SECONDS * KEPT_SHARE)
    codes = tuple(tuple((97 * f + 13 * k) % orpheus.CODEBOOK_SIZE for k in range(orpheus.FRAME_TOKENS))
                  for f in range(frames))
    return ReferenceVoice("bench", SAID[:int(15 * seconds)], codes, seconds)


async def _ttfa(tts: TTS, voice: str, frames: int, requests: int) -> list[float]:
    out = []
    for i in range(requests):
        stream = tts.stream(f"This is request number {i}.", voice, SpeechOptions(seed=i, max_tokens=7 * frames),
                            trim=False)
        async for _ in stream:
            pass
        assert stream.ttfa_s is not None
        out.append(stream.ttfa_s)
    return out


def ttfa(caching: bool, seconds: float, frames: int, requests: int) -> dict[str, object]:
    serving = ServingConfig(max_streams=2, max_seq_len=4096, prefix_caching=caching)
    tts = TTS.load(serving=serving, config=TTSConfig(voices_dir=Path(tempfile.mkdtemp(prefix="lyre-bench-"))))
    try:
        voice = synthetic_voice(seconds)
        tts.references.put(voice)
        prefix = len(tts.references.prefix(voice, tts.tokenizer))
        asyncio.run(_ttfa(tts, "tara", frames, 2))  # warm-up
        model = asyncio.run(_ttfa(tts, "tara", frames, requests))
        cloned = asyncio.run(_ttfa(tts, "bench", frames, requests + 1))
        cache = tts.engine.stats().kv_cache
        return {"prefix_caching": caching, "reference_turn_tokens": prefix,
                "model_voice_ttfa_ms": round(1000 * statistics.median(model), 1),
                "reference_first_ttfa_ms": round(1000 * cloned[0], 1),
                "reference_later_ttfa_ms": round(1000 * statistics.median(cloned[1:]), 1),
                "cache_hits": cache.hits if cache is not None else None}
    finally:
        tts.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clip-seconds", type=float, default=10.0)
    parser.add_argument("--frames", type=int, default=4, help="frames each timed request asks for")
    parser.add_argument("--requests", type=int, default=7)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import torch

    print(f"machine: cpu, {torch.get_num_threads()} threads, the demo model", flush=True)
    tts = TTS.load(config=TTSConfig(voices_dir=Path(tempfile.mkdtemp(prefix="lyre-bench-"))))
    try:
        made = encode(tts, args.clip_seconds)
    finally:
        tts.close()
    print(f"encode: {made['clip_s']} s clip in {made['encode_s']} s ({made['realtime_factor']}x real time), "
          f"{made['frames_kept']} frames kept (the demo codec repeats its coarse codes)", flush=True)
    rows = [ttfa(caching, args.clip_seconds, args.frames, args.requests) for caching in (True, False)]
    for row in rows:
        print(f"prefix caching {'on ' if row['prefix_caching'] else 'off'}: reference turn "
              f"{row['reference_turn_tokens']} tokens; time to first audio p50: model voice "
              f"{row['model_voice_ttfa_ms']} ms, reference voice first request {row['reference_first_ttfa_ms']} ms, "
              f"later ones {row['reference_later_ttfa_ms']} ms (cache hits {row['cache_hits']})", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"encode": made, "ttfa": rows}, indent=2))


if __name__ == "__main__":
    main()
