"""The `lyre` command, run as a real process on the demo model."""

from __future__ import annotations

import subprocess
import sys
import wave
from pathlib import Path

import pytest

from lyre import orpheus
from lyre.cli import main
from lyre.models.demo import DemoPaths

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
        (["say", "Hello.", "--voice", "nobody"], "unknown voice 'nobody'"),
        (["say", "   "], "input is empty"),
        (["say", "Hello.", "--temperature", "nan"], "temperature"),
        (["say", "Hello.", "--model", "/no/such/folder"], "/no/such/folder"),
        (["serve", "--voice-alias", "alloy=bogus"], "'alloy' points at 'bogus', which this model does not have"),
        (["serve", "--voice-alias", "alloy"], "expected NAME=VOICE"),
        (["serve", "--stt", "--llm", "demo", "--sip", "5060"], "--sip must be HOST:PORT"),
        (["serve", "--sip", "127.0.0.1:5060"], "--sip needs the voice agent"),
        (["serve", "--stt", "--llm", "demo", "--sip", "127.0.0.1:5060", "--sip-allow", "lan"],
         "--sip-allow 'lan' is not a network"),
        (["serve", "--stt", "--llm", "demo", "--sip", "127.0.0.1:5060", "--sip-session", "800"],
         "--sip-session must be JSON or NUMBER=JSON"),
        (["serve", "--stt", "--llm", "demo", "--sip", "127.0.0.1:5060", "--sip-session", "800=[1]"],
         "is not a JSON object"),
        (["serve", "--stt", "--llm", "demo", "--sip", "127.0.0.1:5060", "--sip-transfer", "sales=http://x"],
         "--sip-transfer must be NAME=URI with a sip:, sips: or tel: URI"),
        (["serve", "--stt", "--llm", "demo", "--sip", "127.0.0.1:5060", "--sip-auth", "nopassword"],
         "--sip-auth must be USER:PASSWORD"),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(args: list[str], message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # The command's own entry point, in this process: a process start per case would cost seconds of
    # imports each; the case below runs one as a real process.
    assert main(args) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after any notice (the demo model's) comes the error
    assert last.startswith("lyre: error: ") and message in last, last


def test_a_bad_option_ends_the_process_with_a_clear_error_not_a_traceback() -> None:
    done = _lyre("serve", "--device", "gpu")
    assert done.returncode == 2
    assert b"lyre: error: --device: device must be auto, cpu or cuda[:N], got 'gpu'" in done.stderr
    assert b"Traceback" not in done.stderr
