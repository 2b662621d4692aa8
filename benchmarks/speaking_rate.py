"""Speaking rates, in characters a second, for the segment budget's rule (lyre/tts/budget.py).

    .venv/bin/python benchmarks/speaking_rate.py [--whisper]

Speaks a set of sentences (short replies to long, run-on ones, with numbers spelled out) with espeak-ng at several
rates and voices and, where Debian's flite library is installed, with Flite's voices, and prints each speaker's
characters per second over the voiced span of the audio (first to last 10 ms frame within 40 dB of the loudest).
With --whisper, also over the span Whisper's word times give (first word's start to last word's end; the demo
Whisper base), an independent timing of the same audio. The budget assumes no delivery slower than
lyre.tts.budget.SLOWEST_CHARS_PER_S; this shows how far below the measured rates it sits.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from lyre.tts.budget import SLOWEST_CHARS_PER_S  # noqa: E402

TEXTS = (
    "Sure, I can help with that.",
    "Your order shipped this morning and should arrive on Thursday, before noon.",
    "The pharmacy on Main Street closes at nine tonight, but the one by the station stays open until midnight.",
    "Let me check that for you. You have two meetings tomorrow, one at ten with the design team and one just "
    "after lunch with the people from finance, who asked to move it to the small room on the third floor.",
    "I found three flights to Boston on Friday: the earliest leaves at six fifteen and lands a little after "
    "eight, the second leaves at noon, and the last one leaves at seven in the evening, which is also the "
    "cheapest of the three by about forty dollars.",
    "Thanks for waiting.",
)
ESPEAK = (("en-us", 120), ("en-us", 150), ("en-us", 175), ("en-gb", 120), ("en-gb", 175))


def _espeak(text: str, voice: str, wpm: int) -> tuple[np.ndarray, int]:
    out = subprocess.run(["espeak-ng", "-v", voice, "-s", str(wpm), "--stdout", text], capture_output=True,
                         check=True).stdout
    data = out.index(b"data") + 8
    return np.frombuffer(out[data:], np.int16).astype(np.float32) / 32768.0, 22050


def voiced_seconds(audio: np.ndarray, rate: int) -> float:
    """First to last 10 ms frame within 40 dB of the loudest."""
    hop = rate // 100
    frames = audio[: len(audio) // hop * hop].reshape(-1, hop)
    level = 10 * np.log10(np.mean(frames**2, axis=1) + 1e-12)
    loud = np.flatnonzero(level > level.max() - 40)
    return (loud[-1] - loud[0] + 1) * hop / rate


class _Whisper:
    def __init__(self) -> None:
        from faster_whisper import WhisperModel

        from lyre.stt.model import demo_whisper

        self.model = WhisperModel(str(demo_whisper()), device="cpu", compute_type="int8")

    def seconds(self, audio: np.ndarray, rate: int) -> float:
        from scipy.signal import resample_poly

        at16k = resample_poly(audio, 16000, rate).astype(np.float32)
        segments, _ = self.model.transcribe(at16k, language="en", word_timestamps=True, beam_size=1)
        words = [w for s in segments for w in (s.words or [])]
        return words[-1].end - words[0].start if words else float("nan")


def _speakers() -> list[tuple[str, object]]:
    speakers: list[tuple[str, object]] = [(f"espeak-ng {v} {wpm} wpm", (lambda t, v=v, wpm=wpm: _espeak(t, v, wpm)))
                                          for v, wpm in ESPEAK]
    try:
        import flite_events
    except ImportError:
        return speakers
    if flite_events.available():
        for voice in flite_events.FLITE_VOICES:
            def say(text: str, voice: str = voice) -> tuple[np.ndarray, int]:
                spoken = flite_events.synthesize(text, voice=voice)
                return spoken.audio.astype(np.float32) / 32768.0, spoken.rate
            speakers.append((f"flite {voice}", say))
    return speakers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--whisper", action="store_true", help="also time each clip by Whisper's word times")
    args = parser.parse_args()
    whisper = _Whisper() if args.whisper else None
    print(f"{'speaker':26} {'chars/s voiced (min/median/max)':>32}" + (f" {'chars/s by Whisper':>26}" if whisper else ""))
    slowest = float("inf")
    for name, say in _speakers():
        voiced, timed = [], []
        for text in TEXTS:
            audio, rate = say(text)  # type: ignore[operator]
            voiced.append(len(text) / voiced_seconds(audio, rate))
            if whisper is not None:
                timed.append(len(text) / whisper.seconds(audio, rate))
        slowest = min(slowest, *voiced, *(timed or [float("inf")]))
        row = f"{name:26} {min(voiced):10.1f} {statistics.median(voiced):10.1f} {max(voiced):10.1f}"
        if timed:
            row += f" {min(timed):8.1f} {statistics.median(timed):8.1f} {max(timed):8.1f}"
        print(row)
    print(f"slowest clip: {slowest:.1f} chars/s; the budget assumes {SLOWEST_CHARS_PER_S:g} "
          f"({slowest / SLOWEST_CHARS_PER_S:.2f}x slower than the slowest clip)")


if __name__ == "__main__":
    main()
