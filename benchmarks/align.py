"""Forced alignment's accuracy and cost on this machine.

Accuracy: word boundaries against utterances whose boundaries are known to the
sample (tests/align_truth.py: espeak-ng words joined by 70-300 ms pauses), raw
from the alignment heads and after lyre's snapping to pauses. Cost: worker CPU
milliseconds per second of audio, one at a time and 8 in a batch.

    .venv/bin/python benchmarks/align.py [--model PATH_OR_HUB_ID]

The pauses make this the easy case for snapping: in speech with no pause
between two words, their boundary stays where the alignment heads put it (the
"raw" column).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from align_truth import ALIGN_SENTENCES, known_utterance  # noqa: E402

import lyre.stt.align as align  # noqa: E402
from lyre.stt import SAMPLE_RATE, Transcriber, written_words  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", help="a CTranslate2 Whisper folder or hub id (default: the built-in Whisper base)")
    args = p.parse_args()
    stt = Transcriber.load(args.model)
    utterances = [known_utterance(text, seed=i) for i, text in enumerate(ALIGN_SENTENCES)]
    snap = align.snap_to_voice
    raw: list[float] = []
    snapped: list[float] = []
    for u in utterances:
        for mode, errors in (("raw", raw), ("snapped", snapped)):
            align.snap_to_voice = snap if mode == "snapped" else (  # type: ignore[assignment]
                lambda audio, s, e: align._ordered(list(s), list(e)))
            found = align.align_passes(stt.model, [u.audio], [written_words(u.text)])[0]
            for (_, start, end), word in zip(u.words, found.words):
                errors += [abs(word.start - start), abs(word.end - end)]
    align.snap_to_voice = snap
    words = len(raw) // 2
    for name, errors in (("raw", raw), ("snapped", snapped)):
        print(f"{name:8s} boundary error over {words} words: median {1000 * np.median(errors):.0f} ms, "
              f"p95 {1000 * np.percentile(errors, 95):.0f} ms")
    audios, texts = [u.audio for u in utterances], [written_words(u.text) for u in utterances]
    for batch in (1, 8):
        picks = [i % len(audios) for i in range(max(batch, len(audios)))]  # every utterance at least once
        start, audio_s = time.process_time(), 0.0
        for at in range(0, len(picks), batch):
            chunk = picks[at : at + batch]
            align.align_passes(stt.model, [audios[i] for i in chunk], [texts[i] for i in chunk])
            audio_s += sum(audios[i].size for i in chunk) / SAMPLE_RATE
        print(f"batch {batch}: {1000 * (time.process_time() - start) / audio_s:.0f} ms of CPU per second of audio "
              f"({len(picks)} utterances, {audio_s:.0f} s)")
    stt.close()


if __name__ == "__main__":
    main()
