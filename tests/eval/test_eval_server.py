"""`lyre eval` against servers: a real `lyre serve --stt` on the demo model, whose audio is noise and which the
gate must call noise; a server without speech to text; no server; and two stand-in servers that speak with
espeak-ng (real speech, another voice on the second) compared, each started by the gate with --serve."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from serving import Server, running_server
from speech import SENTENCES, speak, wav_bytes

STUB = Path(__file__).with_name("espeak_stub.py")
EVAL_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def demo_stt() -> Iterator[Server]:
    with running_server("--stt", "--max-streams", "2", "--max-seq-len", "330") as s:
        yield s


def _eval(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lyre.cli", "eval", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S)


def test_the_demo_model_s_noise_is_called_noise_by_the_server_s_own_speech_to_text(
        demo_stt: Server, tmp_path: Path) -> None:
    out = tmp_path / "demo.json"
    # wav as lyre streams it (a header whose sizes are unknown when it is sent)
    done = _eval(demo_stt.url, "--limit", "2", "--max-tokens", "56", "--seeds", "5", "--response-format", "wav",
                 "--json", str(out), "--max-wer", "0.5")
    assert done.returncode == 1, done.stdout + done.stderr  # the gate fails the run, and says why
    assert "gate failed" in done.stderr and "is over --max-wer 0.5" in done.stderr
    assert "not the speech asked for" in done.stdout and f"speech to text of {demo_stt.url}" in done.stdout
    report = json.loads(out.read_text())
    assert report["corpus_wer"] >= 0.8 and report["over_50"] == report["utterances"] == 2, report
    assert report["judge"] == f"the speech to text of {demo_stt.url} (whisper-1)"
    assert [row["seed"] for row in report["rows"]] == [5, 6]  # text k with seed 5 + k
    assert all(row["audio_s"] > 0 for row in report["rows"])
    assert report["settings"]["max_tokens"] == 56 and report["settings"]["response_format"] == "wav"
    assert report["similarity"] == {}


def test_a_server_without_speech_to_text_or_no_server_at_all_is_named() -> None:
    with running_server("--max-streams", "1", "--max-seq-len", "330") as plain:
        done = _eval(plain.url, "--limit", "1")
    assert done.returncode == 2
    assert f"the server at {plain.url} has no speech to text" in done.stderr
    assert "start it with --stt, or give --whisper MODEL" in done.stderr, done.stderr
    gone = _eval(plain.url, "--limit", "1")  # stopped by now
    assert gone.returncode == 2 and f"cannot reach the server at {plain.url}" in gone.stderr, gone.stderr
    assert "--max-wer-increase compares two servers" in _eval(plain.url, "--max-wer-increase", "0.1").stderr


def test_two_servers_compared_paired_with_a_bootstrap_interval(tmp_path: Path) -> None:
    reference = tmp_path / "en-us.wav"
    reference.write_bytes(wav_bytes(speak(SENTENCES[12], 16_000, voice="en-us"), 16_000))
    texts = tmp_path / "texts.txt"
    # Sentences both voices say clearly to Whisper base (en-us+f3's "dentist" line comes back garbled)
    texts.write_text("\n".join(SENTENCES[i] for i in (0, 1, 3, 4)) + "\n")
    out, saved = tmp_path / "pair.json", tmp_path / "saved"
    stub = f"{sys.executable} {STUB} --port {{port}}"
    done = _eval("--serve", stub, "--serve", stub + " --variant +f3", "--texts", str(texts), "--voice", "en-us",
                 "--whisper", "demo", "--reference", f"en-us={reference}", "--resamples", "2000",
                 "--max-wer-increase", "0.2", "--save-audio", str(saved), "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    compare = report["compare"]
    assert report["judge"] == compare["judge"] == "the built-in Whisper base, local"
    assert report["corpus_wer"] <= 0.15 and compare["corpus_wer"] <= 0.3, (report["rows"], compare["rows"])
    # Another voice saying the same words: further from the reference, every pair, and the interval says so.
    assert report["similarity"]["en-us"] > compare["similarity"]["en-us"]
    similarity = compare["paired"]["similarity"]
    assert similarity["difference"] < 0 and similarity["ci95"][1] < 0, similarity
    assert similarity["pairs"] == 4 and similarity["resamples"] == 2000
    wer = compare["paired"]["wer"]
    assert wer["ci95"][0] <= wer["difference"] <= wer["ci95"][1] < 0.2, wer
    assert "paired, B - A, over 4 utterances (2000 bootstrap resamples, seed 0)" in done.stdout
    for side in ("a", "b"):  # kept as --audio-dir reads them
        wavs = sorted((saved / side / "en-us").glob("*.wav"))
        assert len(wavs) == 4 and all(w.with_suffix(".txt").read_text().strip() in SENTENCES for w in wavs)
