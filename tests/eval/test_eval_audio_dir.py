"""`lyre eval --audio-dir`: the gate itself checked on real speech (espeak-ng) and on noise, with no server;
and each speaker embedding on espeak-ng's voices."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from speech import SENTENCES, speak, wav_bytes

from lyre.cli import main
from lyre.eval import EMBEDDINGS, cosine, make_embedding, summarise, score

RATE = 16_000
# Four sentences both voices say clearly to Whisper base (en-us+f3's "dentist" line comes back garbled)
SAID = tuple(SENTENCES[i] for i in (0, 1, 3, 4))
SAME, OTHER = "en-us", "en-us+f3"  # one espeak-ng speaker, and another (its female variant 3)


def _write(folder: Path, name: str, audio: np.ndarray, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.wav").write_bytes(wav_bytes(audio, RATE))
    (folder / f"{name}.txt").write_text(text + "\n")


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """DIR/same (en-us), DIR/different (en-us+f3), DIR/noise; and a reference clip of en-us outside DIR."""
    root = tmp_path_factory.mktemp("clips")
    folder = root / "dir"
    for i, text in enumerate(SAID):
        _write(folder / "same", f"s{i}", speak(text, RATE, voice=SAME), text)
        _write(folder / "different", f"s{i}", speak(text, RATE, voice=OTHER), text)
    rng = np.random.default_rng(0)
    for i, text in enumerate(SAID[:2]):
        _write(folder / "noise", f"n{i}", rng.normal(0, 0.1, 3 * RATE).astype(np.float32), text)
    reference = root / "en-us.wav"
    reference.write_bytes(wav_bytes(speak(SENTENCES[12], RATE, voice=SAME), RATE))
    return folder, reference


def test_speech_scores_low_noise_scores_near_one_and_the_same_voice_is_closer(
        clips: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, reference = clips
    out = tmp_path / "gate.json"
    # Both speakers are held to the en-us clip: "same" is that voice, "different" another.
    code = main(["eval", "--audio-dir", str(folder), "--reference", f"same={reference}",
                 "--reference", f"different={reference}", "--json", str(out)])
    table = capsys.readouterr().out
    assert code == 0, table
    report = json.loads(out.read_text())
    rows = report["rows"]
    assert {row["speaker"] for row in rows} == {"same", "different", "noise"} and len(rows) == 10

    def wer(*speakers: str) -> float | None:
        picked = [score(r["text"], r["transcript"]) for r in rows if r["speaker"] in speakers]
        return summarise(picked).corpus_wer

    assert wer("same", "different") <= 0.15, rows
    assert wer("noise") >= 0.8, rows
    assert report["utterances"] == 10 and report["over_50"] >= 2  # the noise clips at least
    assert report["corpus_wer"] == pytest.approx(wer("same", "different", "noise"))
    assert report["similarity"]["same"] > report["similarity"]["different"], report["similarity"]
    assert "noise" not in report["similarity"]  # no reference named for it
    assert report["settings"]["embedding"] == "resemblyzer"
    assert "corpus WER" in table and "same 0." in table


@pytest.mark.parametrize("name", EMBEDDINGS)
def test_each_embedding_finds_a_voice_closer_to_itself_than_to_another(name: str) -> None:
    embedding = make_embedding(name)
    voices = (SAME, OTHER, "en-us+m3")
    vectors = {v: [embedding.embed(speak(text, RATE, voice=v)) for text in SAID] for v in voices}
    for v in voices:
        # different sentences only: the voice is compared, not the words
        same = np.mean([cosine(a, b) for i, a in enumerate(vectors[v]) for j, b in enumerate(vectors[v]) if i < j])
        for other in voices:
            if other != v:
                across = np.mean([cosine(a, b) for i, a in enumerate(vectors[v])
                                  for j, b in enumerate(vectors[other]) if i != j])
                assert same > across, (name, v, other, same, across)
    assert embedding.embed(speak(SAID[0], RATE)[:RATE // 10]) is None  # 0.1 s: too little to know a voice by
    assert embedding.embed(np.zeros(RATE, np.float32)) is None  # silence


def _gate(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["eval", *args])
    return code, capsys.readouterr().err


def test_what_the_gate_cannot_use_is_named(clips: tuple[Path, Path], tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    _, reference = clips
    folder = tmp_path / "dir"
    _write(folder, "fine", speak(SAID[0], RATE), SAID[0])
    (folder / "untold.wav").write_bytes(wav_bytes(speak(SAID[1], RATE), RATE))  # no untold.txt
    code, err = _gate("--audio-dir", str(folder), capsys=capsys)
    assert code == 2 and "untold.wav: no untold.txt beside it" in err, err

    (folder / "untold.txt").write_text(SAID[1])
    (folder / "broken.wav").write_bytes(b"RIFF this is not audio at all")
    (folder / "broken.txt").write_text("anything")
    code, err = _gate("--audio-dir", str(folder), capsys=capsys)
    assert code == 2 and "broken.wav is not an audio file that can be decoded" in err, err

    (folder / "broken.wav").unlink()
    not_audio = tmp_path / "notes.wav"
    not_audio.write_text("a text file named like a clip")
    code, err = _gate("--audio-dir", str(folder), "--reference", f".={not_audio}", capsys=capsys)
    assert code == 2 and f"--reference .={not_audio}: " in err and "not an audio file that can be decoded" in err, err

    quiet = tmp_path / "quiet.wav"
    quiet.write_bytes(wav_bytes(np.zeros(RATE, np.float32), RATE))
    code, err = _gate("--audio-dir", str(folder), "--reference", f".={quiet}", capsys=capsys)
    assert code == 2 and "too little speech" in err, err

    code, err = _gate("--audio-dir", str(tmp_path / "nowhere"), capsys=capsys)
    assert code == 2 and "not a folder" in err, err
    code, err = _gate("--audio-dir", str(folder), "--embedding", "ears", capsys=capsys)
    assert code == 2 and "--embedding must be one of resemblyzer, mfcc, got 'ears'" in err, err
    with pytest.raises(SystemExit):
        main(["eval", "--audio-dir", str(folder), "--reference", "no-equals-sign"])
    assert "expected VOICE=CLIP" in capsys.readouterr().err
