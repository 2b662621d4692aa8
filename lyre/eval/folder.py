"""A folder of audio to score without a server: each ``NAME.wav`` beside its ``NAME.txt``.

    DIR/NAME.wav, DIR/NAME.txt                 speaker "." (the folder itself)
    DIR/SPEAKER/NAME.wav, DIR/SPEAKER/NAME.txt speaker "SPEAKER"

A file's speaker is the folder it sits in, relative to DIR; ``--reference SPEAKER=CLIP`` names the clip its
speaker's voice is compared with (a clip inside DIR is a reference, not scored). Any format ffmpeg reads
counts as audio (``.wav``, ``.flac``, ``.mp3``, ``.ogg``, ``.m4a``); ``lyre eval --save-audio`` writes this
layout, so a run's audio can be scored again.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

__all__ = ["AUDIO_SUFFIXES", "Item", "read_folder", "speaker_of"]

AUDIO_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".m4a")


@dataclass(frozen=True)
class Item:
    name: str  # the path below the folder, without its suffix
    speaker: str
    audio: Path
    text: str


def speaker_of(folder: Path, audio: Path) -> str:
    """The speaker of ``audio`` in ``folder``: the folder it sits in, relative to ``folder`` ("." at the top)."""
    return audio.parent.relative_to(folder).as_posix()


def read_folder(folder: Path, references: Collection[Path] = ()) -> list[Item]:
    """Every audio file below ``folder`` but the ``references``, with its text; a ValueError naming what is
    missing (the folder, any audio, a file's text, or words in it)."""
    if not folder.is_dir():
        raise ValueError(f"--audio-dir {folder}: not a folder")
    skip = {path.resolve() for path in references}
    items = []
    for audio in sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()):
        if audio.resolve() in skip:
            continue
        text_path = audio.with_suffix(".txt")
        try:
            text = text_path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            raise ValueError(f"{audio}: no {text_path.name} beside it (each audio file needs the text it "
                             "should say)") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{text_path}: cannot be read as UTF-8 text ({exc})") from None
        if not text:
            raise ValueError(f"{text_path}: empty (it should hold what {audio.name} says)")
        name = audio.relative_to(folder).with_suffix("").as_posix()
        items.append(Item(name, speaker_of(folder, audio), audio, text))
    if not items:
        raise ValueError(f"--audio-dir {folder}: no audio files ({', '.join(AUDIO_SUFFIXES)}) to score")
    return items
