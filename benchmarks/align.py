"""Word times against the truth, for each aligner: boundary error on continuous speech, and CPU per audio second.

Truth (tests/align_truth.py): whole sentences spoken in one go by libespeak-ng,
words running together, each word's start read from the synthesiser's own word
events; four voices and rates ("continuous"); the same sentences spoken by CMU
Flite's three statistical voices, a synthesiser with nothing in common with
espeak-ng, timed by its own segments ("flite", where Debian's flite is
installed); and the same sentences as words spoken one by one with 70-300 ms
pauses ("paused", the easy case), and held-out sentences (tests/speech.py's
others) spoken so in the four voices ("paused-held"). Aligners:

- phones: lyre's English default (lyre.stt.phone_align: pocketsphinx en-us, CMUdict, gruut G2P);
- whisper: lyre's Whisper aligner (alignment heads, then snapped to pauses and voice), other languages';
- whisper-raw: the same without the snapping;
- fw-words: faster-whisper's own ``word_timestamps=True`` on a transcription (words it heard are matched to
  the text's; those it did not are left out).

Also the phone aligner's cost where it fails and hands over to Whisper: each
sentence's words against 4 s of white noise (what the demo TTS model speaks).

For each: boundaries compared (every known word start and end), the median and
p95 absolute error, the share within 20 and 50 ms, the median signed error
(negative: early), and CPU seconds per second of audio (process time, one at a
time; run with OMP_NUM_THREADS=1 for one thread).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/align.py [--aligners phones,whisper] [--model WHISPER] [--by-voice]

``--by-voice`` also reports the continuous set voice by voice (speaker and rate).
"""

from __future__ import annotations

import argparse
import difflib
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import flite_events  # noqa: E402
from speech import SENTENCES  # noqa: E402
from align_truth import (  # noqa: E402
    ALIGN_SENTENCES,
    VOICES,
    KnownUtterance,
    flite_utterance,
    paused_utterance,
    truth_set,
)

from lyre.stt import (  # noqa: E402
    SAMPLE_RATE,
    PhoneAligner,
    PhoneAlignmentFailed,
    STTConfig,
    Transcriber,
    written_words,
)
from lyre.stt.align import align_passes  # noqa: E402
from lyre.text.verbalize import readings  # noqa: E402

Times = list[tuple[float, float] | None]  # per written word: (start, end), or None where it was not placed


def _said(word: str) -> str:
    said = readings(word)
    return " ".join(said[0]) if said else ""


def _fw_words(stt: Transcriber) -> Callable[[KnownUtterance], Times]:
    def run(u: KnownUtterance) -> Times:
        segments, _ = stt.model.transcribe(u.audio, language="en", word_timestamps=True, beam_size=1)
        heard = [w for s in segments for w in (s.words or [])]
        mine = [_said(w) for w in written_words(u.text)]
        theirs = [_said(w.word.strip()) for w in heard]
        times: Times = [None] * len(mine)
        for block in difflib.SequenceMatcher(a=mine, b=theirs, autojunk=False).get_matching_blocks():
            for k in range(block.size):
                word = heard[block.b + k]
                times[block.a + k] = (word.start, word.end)
        return times
    return run


def _aligners(names: list[str], model: str | None) -> dict[str, Callable[[KnownUtterance], Times]]:
    out: dict[str, Callable[[KnownUtterance], Times]] = {}
    stt = Transcriber.load(model, STTConfig(cpu_threads=1)) if set(names) - {"phones"} else None
    for name in names:
        if name == "phones":
            phones = PhoneAligner()
            out[name] = lambda u: [(w.start, w.end) for w in phones.align_now(u.audio, written_words(u.text)).words]
        elif name in ("whisper", "whisper-raw"):
            assert stt is not None
            snap = name == "whisper"
            out[name] = lambda u, snap=snap: [(w.start, w.end) for w in align_passes(
                stt.model, [u.audio], [written_words(u.text)], snap=snap)[0].words]
        elif name == "fw-words":
            assert stt is not None
            out[name] = _fw_words(stt)
        else:
            raise SystemExit(f"unknown aligner {name!r}")
    return out


def _measure(run: Callable[[KnownUtterance], Times], utterances: list[KnownUtterance]) -> str:
    run(utterances[0])  # warm-up: lazy loads (the G2P, the first encoder pass) are not the per-second cost
    errors: list[float] = []
    cpu = audio_s = 0.0
    missed = 0
    for u in utterances:
        start = time.process_time()
        times = run(u)
        cpu += time.process_time() - start
        audio_s += u.audio.size / SAMPLE_RATE
        for i, side, truth in u.boundaries():
            if times[i] is None:
                missed += 1
                continue
            errors.append((times[i][0] if side == "start" else times[i][1]) - truth)
    e = np.array(errors)
    a = np.abs(e)
    return (f"{len(e):5d} {1000 * np.median(a):7.1f} {1000 * np.percentile(a, 95):7.1f} {np.mean(a <= 0.02):6.1%} "
            f"{np.mean(a <= 0.05):6.1%} {1000 * np.median(e):+7.1f} {1000 * cpu / audio_s:8.1f}"
            + (f"  ({missed} boundaries of words not heard)" if missed else ""))


def _failing_on_noise() -> str:
    phones = PhoneAligner()
    rng = np.random.default_rng(0)
    noises = [(0.1 * rng.standard_normal(4 * SAMPLE_RATE)).astype(np.float32) for _ in ALIGN_SENTENCES]
    failed, cpu = 0, 0.0
    for noise, text in zip(noises, ALIGN_SENTENCES):
        start = time.process_time()
        try:
            phones.align_now(noise, written_words(text))
        except PhoneAlignmentFailed:
            failed += 1
        cpu += time.process_time() - start
    return (f"phones on noise: {failed} of {len(noises)} failed (wide beams too), "
            f"{1000 * cpu / (4 * len(noises)):.1f} ms of CPU per audio second before handing over")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--aligners", default="phones,whisper,whisper-raw,fw-words")
    p.add_argument("--model", help="a CTranslate2 Whisper folder or hub id (default: the built-in Whisper base)")
    p.add_argument("--by-voice", action="store_true", help="the continuous set voice by voice too")
    args = p.parse_args()
    sets = {"continuous": truth_set(),
            "paused": [paused_utterance(text, seed=i) for i, text in enumerate(ALIGN_SENTENCES)],
            "paused-held": [paused_utterance(text, seed=50 + i, voice=voice, wpm=wpm) for voice, wpm in VOICES
                            for i, text in enumerate(s for s in SENTENCES if s not in ALIGN_SENTENCES)]}
    if flite_events.available():
        sets["flite"] = [flite_utterance(text, voice, seed=i) for voice in flite_events.FLITE_VOICES
                         for i, text in enumerate(ALIGN_SENTENCES)]
    if args.by_voice:
        for v, voice in enumerate(VOICES):
            sets[f"{voice[0]}/{voice[1]}"] = sets["continuous"][v * len(ALIGN_SENTENCES):(v + 1) * len(ALIGN_SENTENCES)]
    for name, utterances in sets.items():
        print(f"{name}: {len(utterances)} utterances, {sum(u.audio.size for u in utterances) / SAMPLE_RATE:.0f} s")
    print(f"{'aligner':12s} {'set':12s} {'n':>5s} {'median':>7s} {'p95':>7s} {'<=20ms':>6s} {'<=50ms':>6s} "
          f"{'bias':>7s} {'CPU ms/s':>8s}")
    for name, run in _aligners(args.aligners.split(","), args.model).items():
        for set_name, utterances in sets.items():
            print(f"{name:12s} {set_name:12s} {_measure(run, utterances)}")
    if "phones" in args.aligners.split(","):
        print(_failing_on_noise())


if __name__ == "__main__":
    main()
