"""The `lyre` command, run as a real process on the demo model."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest

from lyre import orpheus
from lyre.demo_model import DemoPaths

pytestmark = pytest.mark.slow


def _lyre(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "lyre.cli", *args], capture_output=True, timeout=300)


def test_say_writes_a_wav_of_whole_frames(demo: DemoPaths, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    done = _lyre("say", "Hello there.", "--voice", "leo", "--max-tokens", "70", "--seed", "3", "-o", str(out),
                 "--model", str(demo.model), "--codec", str(demo.codec))
    assert done.returncode == 0, done.stderr.decode()
    with wave.open(str(out)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, orpheus.SAMPLE_RATE)
        samples = w.getnframes()
    assert samples > 0 and samples % orpheus.SAMPLES_PER_FRAME == 0
    assert samples <= 10 * orpheus.SAMPLES_PER_FRAME  # 70 tokens = 10 frames at most
    assert b"frames" in done.stderr


def test_say_to_stdout_writes_raw_pcm_and_the_default_model_warns(tmp_path: Path) -> None:
    done = _lyre("say", "Hi.", "--max-tokens", "14", "--seed", "1", "-o", "-")
    assert done.returncode == 0, done.stderr.decode()
    assert len(done.stdout) > 0 and len(done.stdout) % (2 * orpheus.SAMPLES_PER_FRAME) == 0
    assert b"demo model" in done.stderr and b"noise, not speech" in done.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["say", "Hello.", "--voice", "nobody"], b"unknown voice 'nobody'"),
        (["say", "   "], b"input is empty"),
        (["say", "Hello.", "--temperature", "nan"], b"temperature"),
        (["say", "Hello.", "--model", "/no/such/folder"], b"/no/such/folder"),
        (["serve", "--voice-alias", "alloy=bogus"], b"'alloy' points at 'bogus', which this model does not have"),
        (["serve", "--voice-alias", "alloy"], b"expected NAME=VOICE"),
        (["serve", "--device", "gpu"], b"--device: device must be auto, cpu or cuda[:N], got 'gpu'"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(args: list[str], message: bytes) -> None:
    done = _lyre(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert b"Traceback" not in done.stderr
