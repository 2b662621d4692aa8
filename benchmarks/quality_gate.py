"""The quality gate checked on real speech: espeak-ng's voices and noise through `lyre eval --audio-dir`'s code.

    PYTHONPATH=. .venv/bin/python benchmarks/quality_gate.py [--voices en-us en-us+f3 ...] [--out DIR]

1. writes each test sentence (tests/speech.py, fourteen) in each espeak-ng voice, and as many clips of white
   noise with the same texts, to DIR in `lyre eval --audio-dir`'s layout (a folder per speaker);
2. scores the folder as ``lyre eval --audio-dir DIR`` does (`lyre.eval.score_folder`, the built-in Whisper
   base): WER per voice, and for noise;
3. for each speaker embedding, the similarity of every pair of clips: same voice (two different sentences)
   against different voices, their means, and the share of (same, different) pairs ranked the right way
   round (the area under the ROC curve: 1 separates every pair, 0.5 is chance).

espeak-ng's ``en-us``, ``en-gb`` and ``en-gb-scotland`` are one synthetic speaker with three accents; its
``+f3``, ``+m3``, ... variants are other speakers (pitch, formants, breathiness).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # tests/speech.py: espeak-ng's voice

from speech import SENTENCES, speak, wav_bytes  # noqa: E402

from lyre.eval import EMBEDDINGS, EvalConfig, make_embedding, score_folder, summarise  # noqa: E402

RATE = 16_000
NOISE_RMS = 0.1


def write_folder(root: Path, voices: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    for voice in voices + ["noise"]:
        folder = root / voice
        folder.mkdir(parents=True, exist_ok=True)
        for i, text in enumerate(SENTENCES):
            audio = (rng.normal(0, NOISE_RMS, 3 * RATE).astype(np.float32) if voice == "noise"
                     else speak(text, RATE, voice=voice))
            (folder / f"s{i:02d}.wav").write_bytes(wav_bytes(audio, RATE))
            (folder / f"s{i:02d}.txt").write_text(text + "\n")


def similarities(voices: list[str], name: str) -> dict[str, float]:
    embedding = make_embedding(name)
    started = time.perf_counter()
    vectors = {v: [embedding.embed(speak(text, RATE, voice=v)) for text in SENTENCES] for v in voices}
    per_clip_ms = 1000 * (time.perf_counter() - started) / (len(voices) * len(SENTENCES))
    same, different = [], []
    for (va, a), (vb, b) in itertools.combinations([(v, i) for v in voices for i in range(len(SENTENCES))], 2):
        if a == b:
            continue  # the same sentence: only voices are compared, never words
        x, y = vectors[va][a], vectors[vb][b]
        (same if va == vb else different).append(float(np.dot(x, y) / np.linalg.norm(x) / np.linalg.norm(y)))
    s, d = np.array(same), np.array(different)
    auc = float((s[:, None] > d[None, :]).mean() + 0.5 * (s[:, None] == d[None, :]).mean())
    return {"same": float(s.mean()), "different": float(d.mean()), "auc": auc, "ms_per_clip": per_clip_ms}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--voices", nargs="+", default=["en-us", "en-us+f3", "en-us+m3", "en-gb+f2", "en-us+m7"])
    p.add_argument("--out", type=Path, help="where the clips go (default: a temporary folder)")
    args = p.parse_args()
    root = args.out or Path(tempfile.mkdtemp(prefix="lyre-quality-gate-"))
    write_folder(root, args.voices)
    print(f"clips in {root}: {len(SENTENCES)} sentences x {len(args.voices)} voices, and noise")
    (scored,) = asyncio.run(score_folder(root, EvalConfig())).sides
    print(f"WER by speaker ({scored.judge}):")
    for speaker in args.voices + ["noise"]:
        summary = summarise([row.words for row in scored.rows if row.utterance.speaker == speaker])
        print(f"  {speaker:12s} corpus WER {summary.corpus_wer:.3f}, {summary.over_50} of {summary.utterances} "
              "over 50%")
    spoken = summarise([row.words for row in scored.rows if row.utterance.speaker != "noise"])
    print(f"  all voices   corpus WER {spoken.corpus_wer:.3f}, {spoken.over_50} of {spoken.utterances} over 50%")
    print("speaker similarity, pairs of different sentences:")
    for name in EMBEDDINGS:
        f = similarities(args.voices, name)
        print(f"  {name:12s} same voice {f['same']:.3f}, different voices {f['different']:.3f}, "
              f"AUC {f['auc']:.3f}, {f['ms_per_clip']:.0f} ms a clip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
