"""train-voice's data preparation on bad data: every unusable clip skipped with its reason, and a dataset
with none left refused before any training, with nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from lyre.cli import main
from lyre.models.demo import DemoPaths
from lyre.train import DataConfig, SilenceCut, TrainConfig, VoiceJob, prepare_voice_data, read_dataset
from lyre.tts.clips import trim_clip
from lyre.train.dataset import DatasetError
from voice_data import tone, write_flac_stereo, write_wav

RATE = 16_000


def _job(data: Path, out: Path, demo: DemoPaths, **data_config: object) -> VoiceJob:
    return VoiceJob(data, out, DataConfig("ada", **data_config), TrainConfig(), str(demo.model), str(demo.codec))


@pytest.fixture(scope="module")
def ljspeech(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad-ljspeech")
    wavs = root / "wavs"
    write_wav(wavs / "good.wav", tone(1.0), RATE)
    write_wav(wavs / "no-text.wav", tone(1.0), RATE)
    write_wav(wavs / "control.wav", tone(1.0), RATE)
    (wavs / "garbage.wav").write_bytes(b"RIFF\x00\x00 this is not audio " * 40)
    (wavs / "empty.wav").write_bytes(b"")
    write_wav(wavs / "silent.wav", np.zeros(RATE, np.int16), RATE)
    write_wav(wavs / "clipped.wav", tone(1.0, amplitude=3.0), RATE)
    write_wav(wavs / "short.wav", tone(0.3), RATE)
    write_wav(wavs / "long.wav", tone(3.0), RATE)
    (root / "metadata.csv").write_text("\n".join([
        "good|A plain clip.",
        "no-text|",
        "control|Say <custom_token_2> now.",
        "garbage|Not audio at all.",
        "empty|Nothing in it.",
        "silent|Nobody speaks.",
        "clipped|Far too loud.",
        "short|Hi.",
        "long|This one goes on for a while.",
        "missing|Its file is not there.",
        "four|columns|in|this line",
    ]) + "\n")
    return root


EXPECTED = {
    "no-text": "missing transcript",
    "control": "control tokens",
    "garbage": "unreadable",
    "empty": "empty",
    "silent": "silent",
    "clipped": "clipped",
    "short": "too short: 0.",
    "long": "too long",
    "missing": "no audio file",
    "four": "4 columns; expected 2 (id|text) or 3",
}


def test_every_bad_clip_is_skipped_with_its_reason(ljspeech: Path, demo: DemoPaths, tmp_path: Path) -> None:
    # 160 tokens hold the prompt and about 1.7 s of audio: the 3 s clip is longer than that context.
    prepared, _ = prepare_voice_data(_job(ljspeech, tmp_path / "out", demo, max_seq_len=160))
    assert [c.id for c in prepared.clips] == ["good"]
    reasons = {s.id: s.reason for s in prepared.skipped}
    assert reasons.keys() == EXPECTED.keys()
    for clip, reason in EXPECTED.items():
        assert reason in reasons[clip], (clip, reasons[clip])
    report = prepared.report()
    assert "1 clips used, 10 skipped" in report and "skipped clipped: clipped:" in report
    assert not (tmp_path / "out").exists()  # preparing writes only the cache beside it


def test_a_manifest_reads_any_format_and_skips_its_bad_lines(demo: DemoPaths, tmp_path: Path) -> None:
    data = tmp_path / "manifest"
    write_flac_stereo(data / "audio" / "a.flac", tone(1.2, rate=44_100), 44_100)
    write_wav(data / "audio" / "b.wav", tone(1.0), RATE)
    (data / "manifest.jsonl").write_text("\n".join([
        json.dumps({"audio": "audio/a.flac", "text": "Stereo at forty four kilohertz."}),
        json.dumps({"audio": "audio/b.wav"}),
        "{not json",
        json.dumps({"text": "No audio named."}),
    ]) + "\n")
    prepared, _ = prepare_voice_data(_job(data, tmp_path / "out", demo))
    assert [c.id for c in prepared.clips] == ["audio/a.flac"]
    # 1.2 s of tone, its trailing pad and the ramp of the 10 ms blocks: about 1.2 s kept, none of it cut.
    assert prepared.clips[0].seconds == pytest.approx(1.2, abs=0.02) and prepared.clips[0].lead_cut_s == 0
    reasons = {s.id: s.reason for s in prepared.skipped}
    assert reasons["audio/b.wav"] == "missing transcript"
    assert "line 3 is not JSON" in reasons["line 3"] and 'names no "audio" file' in reasons["line 4"]


def test_the_silence_cut_keeps_its_pads() -> None:
    rate = 24_000
    pcm = np.concatenate([np.zeros(rate // 2), tone(1.0, rate) / 32768, np.zeros(rate)]).astype(np.float32)
    cut = trim_clip(pcm, SilenceCut(lead_pad_ms=50, tail_pad_ms=100))
    assert cut.lead_cut_s == pytest.approx(0.45, abs=0.011) and cut.tail_cut_s == pytest.approx(0.9, abs=0.011)
    assert cut.seconds == pytest.approx(1.15, abs=0.011)
    kept = trim_clip(pcm, SilenceCut(cut_leading=False))
    assert kept.lead_cut_s == 0 and kept.seconds == pytest.approx(1.6, abs=0.011)


@pytest.mark.parametrize("case", ["all bad", "no dataset", "not a folder"])
def test_no_usable_clip_is_a_clear_error_before_training_and_writes_nothing(
        case: str, ljspeech: Path, demo: DemoPaths, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, message = {
        "all bad": (tmp_path / "bad", "no usable clip in"),
        "no dataset": (tmp_path, "holds neither metadata.csv"),
        "not a folder": (tmp_path / "nowhere", "does not exist"),
    }[case]
    if case == "all bad":
        (data / "wavs").mkdir(parents=True)
        (data / "wavs" / "silent.wav").write_bytes((ljspeech / "wavs" / "silent.wav").read_bytes())
        (data / "metadata.csv").write_text("silent|Nobody speaks.\nmissing|No file.\n")
    out = tmp_path / "adapters" / "ada"
    code = main(["train-voice", str(data), "--out", str(out), "--voice", "ada", "--model", str(demo.model),
                 "--codec", str(demo.codec), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists() and not out.parent.exists()


def test_an_existing_adapter_folder_is_kept_unless_overwrite_is_asked(tmp_path: Path, demo: DemoPaths,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "ada"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["train-voice", str(tmp_path), "--out", str(out), "--voice", "ada", "--no-progress"]) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


def test_a_bad_voice_name_or_dataset_is_refused() -> None:
    with pytest.raises(ValueError, match="no ':'"):
        DataConfig("ada: the second")
    with pytest.raises(DatasetError, match="does not exist"):
        read_dataset("/no/such/dataset")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_asked_for_where_there_is_none_is_refused_first(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-voice", str(tmp_path), "--out", str(tmp_path / "ada"), "--voice", "ada",
                 "--device", "cuda"]) == 2
    assert "CUDA is not available" in capsys.readouterr().err


def test_a_folder_is_published_whole_or_not_at_all(tmp_path: Path) -> None:
    from lyre.train.checkpoint import publish_folder

    target = tmp_path / "ada"

    def write(text: str) -> Callable[[Path], None]:
        return lambda folder: (folder / "weights").write_text(text)

    publish_folder(target, write("first"))
    with pytest.raises(FileExistsError):
        publish_folder(target, write("second"))

    def fails(folder: Path) -> None:
        (folder / "weights").write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish_folder(target, fails, replace=True)
    assert (target / "weights").read_text() == "first"
    publish_folder(target, write("second"), replace=True)
    assert (target / "weights").read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["ada"]  # nothing partial or replaced left beside it
