"""`lyre train-voice` end to end on the demo model: espeak-ng clips with leading silence in, an adapter
that peft loads and `lyre serve` serves out; the silence cut; the cache; resuming an interrupted run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from lyre import orpheus
from lyre.cli import main
from lyre.codec.encoder import SnacEncoder
from lyre.codec.snac import load_snac
from lyre.models.demo import DemoPaths
from lyre.models.peft_folder import read_peft_adapter
from lyre.models.config import LlamaConfig
from lyre.train import (DataConfig, SilenceCut, TrainConfig, VoiceJob, leading_silent_frames, prepare_voice_data,
                        silence_frames, train_voice, work_folder)
from serving import running_server
from speech import SENTENCES
from voice_data import LEADING_SILENCE_S, spoken_dataset

pytestmark = pytest.mark.slow

VOICE = "tara"  # a speaker the base model knows, so the adapter's prompts equal the base voice's
STEPS, BATCH, LR = 3, 1, 1e-3
TRAIN_ARGS = ["--steps", str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--warmup-steps", "1"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return spoken_dataset(tmp_path_factory.mktemp("voice"), [SENTENCES[6], SENTENCES[4], SENTENCES[12], SENTENCES[2]])


@pytest.fixture(scope="module")
def trained(dataset: Path, demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The adapter the command writes, run as a real process; and what it printed."""
    out = tmp_path_factory.mktemp("adapters") / "cloned"
    done = subprocess.run([sys.executable, "-m", "lyre.cli", "train-voice", str(dataset), "--out", str(out),
                           "--voice", VOICE, "--model", str(demo.model), "--codec", str(demo.codec), *TRAIN_ARGS,
                           "--checkpoint-every", "1"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out, done.stderr


def _job(dataset: Path, out: Path, demo: DemoPaths, silence: SilenceCut = SilenceCut()) -> VoiceJob:
    return VoiceJob(dataset, out, DataConfig(VOICE, silence),
                    TrainConfig(steps=STEPS, batch_size=BATCH, learning_rate=LR, warmup_steps=1, checkpoint_every=1),
                    model=str(demo.model), codec=str(demo.codec))


def test_the_adapter_folder_holds_a_servable_lora_and_the_voice_file(trained: tuple[Path, str],
                                                                     demo: DemoPaths) -> None:
    out, printed = trained
    assert "4 clips used, 0 skipped" in printed and "leading silence cut" in printed
    assert "training 3 steps on 3 clips (1 held out for validation)" in printed
    voice = json.loads((out / "lyre_voice.json").read_text())
    assert voice["speaker"] == VOICE and voice["base_model"] == str(demo.model)
    assert voice["dataset"]["clips"] == 4 and voice["dataset"]["skipped"] == 0
    # Every clip opened with 600 ms of silence (and espeak-ng's own); all but the 50 ms pad went.
    assert 4 * (LEADING_SILENCE_S - 0.05) <= voice["dataset"]["leading_silence_cut_s"] < 4 * (LEADING_SILENCE_S + 0.2)
    assert voice["training"]["steps_run"] == STEPS and voice["training"]["rank"] == 16
    config = LlamaConfig.from_hf(json.loads((demo.model / "config.json").read_text()))
    weights = read_peft_adapter("cloned", out, config, 16)  # the server's own reader accepts it whole
    assert weights.rank == 16 and weights.scale == 2.0 and len(weights.weights) == 7 * config.num_hidden_layers
    assert not list(out.parent.glob(f".{out.name}.*"))  # no partial or replaced folder left beside it
    assert not list(work_folder(out).glob("checkpoint-*"))  # removed once the adapter is complete


def test_peft_loads_it_and_it_lowered_the_loss_on_the_clips(trained: tuple[Path, str], dataset: Path,
                                                            demo: DemoPaths) -> None:
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    out, _ = trained
    prepared, _ = prepare_voice_data(_job(dataset, out, demo))  # the cache beside the adapter
    base = LlamaForCausalLM.from_pretrained(demo.model, dtype=torch.float32).eval()

    def loss(model: torch.nn.Module) -> float:
        total, count = 0.0, 0
        with torch.no_grad():
            for clip in prepared.clips[:2]:
                ids = torch.tensor([clip.ids])
                logits = model(ids).logits[0, clip.prompt_len - 1:-1]  # predicting the audio and end tokens
                total += float(torch.nn.functional.cross_entropy(logits, ids[0, clip.prompt_len:], reduction="sum"))
                count += len(clip.ids) - clip.prompt_len
        return total / count

    before = loss(base)
    adapted = PeftModel.from_pretrained(base, out).eval()
    assert loss(adapted) < before - 0.05


def test_a_rerun_reads_the_prepared_dataset_instead_of_encoding(trained: tuple[Path, str], dataset: Path,
                                                                demo: DemoPaths) -> None:
    out, _ = trained

    def no_encoding() -> SnacEncoder:
        raise AssertionError("the codec was loaded: the cache was not used")

    prepared, _ = prepare_voice_data(_job(dataset, out, demo), encoder=no_encoding)
    assert prepared.cached and len(prepared.clips) == 4
    assert "read from the cache" in prepared.report()


def test_the_cut_clips_open_with_speech_and_the_kept_ones_with_snac_silence(trained: tuple[Path, str],
                                                                            dataset: Path, demo: DemoPaths,
                                                                            tmp_path: Path) -> None:
    out, _ = trained
    encoder = SnacEncoder(load_snac(demo.codec))
    silence = silence_frames(encoder)
    cut, _ = prepare_voice_data(_job(dataset, out, demo))
    kept, _ = prepare_voice_data(_job(dataset, tmp_path / "kept", demo, SilenceCut(cut_leading=False)),
                                 encoder=lambda: encoder)
    whole_silent_frames = int(LEADING_SILENCE_S // orpheus.FRAME_SECONDS)  # 7 frames of 85 ms in 600 ms
    for c, k in zip(cut.clips, kept.clips, strict=True):
        assert c.id == k.id and c.ids[:c.prompt_len] == k.ids[:k.prompt_len]  # the same prompt
        assert c.ids[-2:] == k.ids[-2:] == [orpheus.END_OF_SPEECH, orpheus.END_OF_AI]
        opening_kept = leading_silent_frames(k.audio_tokens, silence)
        assert opening_kept >= whole_silent_frames
        # The 50 ms pad and a soft onset (a plosive's closure) may still encode as silence, no more.
        assert leading_silent_frames(c.audio_tokens, silence) <= min(2, opening_kept - whole_silent_frames + 1)
        assert len(k.audio_tokens) - len(c.audio_tokens) >= 7 * (whole_silent_frames - 1)


def test_serve_serves_it_as_a_voice_that_differs_from_the_base_voice(trained: tuple[Path, str],
                                                                     demo: DemoPaths) -> None:
    out, _ = trained

    def pcm(url: str, voice: str) -> np.ndarray:
        r = httpx.post(f"{url}/v1/audio/speech", timeout=120, json={
            "input": "Same words.", "voice": voice, "response_format": "pcm", "trim_silence": False,
            "max_tokens": 70, "seed": 1})
        assert r.status_code == 200, r.text
        return np.frombuffer(r.content, dtype="<i2").astype(np.float64)

    with running_server("--model", str(demo.model), "--codec", str(demo.codec), "--max-streams", "2",
                        "--adapter", f"cloned={out}") as server:
        voices = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
        assert {"id": "cloned", "speaker": VOICE} in [{"id": v["id"], "speaker": v.get("speaker")} for v in voices]
        first, again, base = pcm(server.url, "cloned"), pcm(server.url, "cloned"), pcm(server.url, VOICE)
    def snr_db(a: np.ndarray, b: np.ndarray) -> float:
        n = min(len(a), len(b))
        return float(10 * np.log10(np.sum(a[:n] ** 2) / (np.sum((a[:n] - b[:n]) ** 2) + 1e-9)))

    # The same prompt and seed through the adapter: the same tokens, so the same audio up to window edges.
    assert len(first) == len(again) > 0 and snr_db(first, again) > 25
    # The same prompt and seed on the base model ("tara: Same words."): other tokens, so audio unlike it.
    assert len(base) != len(first) or snr_db(first, base) < 25


def test_an_interrupted_run_writes_nothing_and_resumes_to_the_same_adapter(
        trained: tuple[Path, str], dataset: Path, demo: DemoPaths, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "resumed"
    job = _job(dataset, out, demo)

    def stop_after_two(step: int, loss: float) -> None:
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train_voice(job, show_progress=False, on_step=stop_after_two)
    assert not out.exists()
    assert [p.name for p in work_folder(out).glob("checkpoint-*")] == ["checkpoint-0000002"]

    args = ["train-voice", str(dataset), "--out", str(out), "--voice", VOICE, "--model", str(demo.model),
            "--codec", str(demo.codec), *TRAIN_ARGS, "--no-progress"]
    assert main(args) == 2  # a checkpoint is waiting: not silently started over
    assert "pass --resume" in capsys.readouterr().err
    assert main([*args, "--resume"]) == 0
    ours, theirs = load_file(out / "adapter_model.safetensors"), load_file(trained[0] / "adapter_model.safetensors")
    assert ours.keys() == theirs.keys()
    for key in ours:  # bit for bit what the uninterrupted run made
        assert torch.equal(ours[key], theirs[key]), key
    assert json.loads((out / "lyre_voice.json").read_text())["training"]["final_train_loss"] == \
        json.loads((trained[0] / "lyre_voice.json").read_text())["training"]["final_train_loss"]


def test_a_run_whose_loss_turns_non_finite_stops_with_a_clear_error_and_publishes_nothing(
        dataset: Path, demo: DemoPaths, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    cross_entropy = torch.nn.functional.cross_entropy
    training_losses: list[int] = []

    def diverging(*args: object, **kwargs: object) -> torch.Tensor:
        loss = cross_entropy(*args, **kwargs)  # type: ignore[arg-type]
        if torch.is_grad_enabled():  # a training step's loss, not validation's
            training_losses.append(1)
            if len(training_losses) >= 2:
                return loss * float("nan")  # as a run whose weights blew up at step 2 computes it
        return loss

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", diverging)
    out = tmp_path / "diverged"
    args = ["train-voice", str(dataset), "--out", str(out), "--voice", VOICE, "--model", str(demo.model),
            "--codec", str(demo.codec), *TRAIN_ARGS, "--checkpoint-every", "1", "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "loss became nan at step 2" in err and "diverged" in err
    assert not out.exists()  # never published
    assert not list(work_folder(out).glob("checkpoint-0000002"))  # nor checkpointed past the good step
