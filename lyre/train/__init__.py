"""The voice LoRA recipe: clone a voice from a dataset folder into an adapter `lyre serve` serves.

    job = VoiceJob(Path("data/ada"), Path("voices/ada"), DataConfig(voice="ada"))
    train_voice(job)            # prints the dataset report, a progress bar, the losses

Clips have their leading silence cut before they are encoded, so the voice
learns to start speaking at once rather than after the ~600 ms of silence
Orpheus's base model opens with.
"""

from lyre.tts.clips import ClipRejected, SilenceCut
from lyre.train.dataset import DatasetError, read_dataset
from lyre.train.prepare import Clip, DataConfig, NoUsableClip, PreparedDataset
from lyre.train.silence import leading_silent_frames, silence_frames
from lyre.train.trainer import TrainConfig, TrainError, TrainResult
from lyre.train.voice import VoiceJob, prepare_voice_data, train_voice, work_folder

__all__ = [
    "Clip",
    "ClipRejected",
    "DataConfig",
    "DatasetError",
    "NoUsableClip",
    "PreparedDataset",
    "SilenceCut",
    "TrainConfig",
    "TrainError",
    "TrainResult",
    "VoiceJob",
    "leading_silent_frames",
    "prepare_voice_data",
    "read_dataset",
    "silence_frames",
    "train_voice",
    "work_folder",
]
