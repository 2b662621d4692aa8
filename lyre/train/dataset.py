"""Dataset folders in the layouts TTS people already use: LJSpeech's metadata.csv, or a manifest.jsonl.

    metadata.csv     id|text  or  id|text|normalized_text, audio in wavs/<id>.wav
    manifest.jsonl   {"audio": "path/relative/to/the/folder.flac", "text": "..."}

Reading never stops at a bad line: each becomes a `Skipped` with the reason.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DatasetError", "Entry", "Listing", "Skipped", "read_dataset"]

METADATA, MANIFEST, WAVS = "metadata.csv", "manifest.jsonl", "wavs"


class DatasetError(ValueError):
    """A dataset that cannot be read at all; the message says what was wrong."""


@dataclass(frozen=True)
class Entry:
    """One clip the dataset lists: its name in reports, its audio file and its transcript."""

    id: str
    audio: Path
    text: str


@dataclass(frozen=True)
class Skipped:
    """A clip (or a line naming none) that training leaves out, and why."""

    id: str
    reason: str


@dataclass(frozen=True)
class Listing:
    source: Path  # the metadata or manifest file read
    entries: list[Entry]
    skipped: list[Skipped]


def read_dataset(folder: str | Path) -> Listing:
    """The clips a dataset folder lists; DatasetError when it is not a dataset folder."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise DatasetError(f"dataset folder '{folder}' does not exist")
    if (folder / METADATA).is_file():
        return _read_metadata(folder / METADATA)
    if (folder / MANIFEST).is_file():
        return _read_manifest(folder / MANIFEST)
    raise DatasetError(f"'{folder}' holds neither {METADATA} (LJSpeech: id|text[|normalized_text] with "
                       f"{WAVS}/<id>.wav) nor {MANIFEST} (one {{\"audio\": path, \"text\": ...}} per line)")


def _ljspeech_audio(wavs: Path, clip: str) -> Path:
    """wavs/<id>.wav, or wavs/<id>.<any extension> when the clips are in another format."""
    wav = wavs / f"{clip}.wav"
    if wav.exists():
        return wav
    others = sorted(p for p in wavs.glob(f"{clip}.*") if p.is_file()) if wavs.is_dir() else []
    return others[0] if others else wav


def _read_metadata(path: Path) -> Listing:
    entries, skipped = [], []
    with path.open(encoding="utf-8", newline="") as f:
        # LJSpeech quotes nothing: a quote mark is part of the text.
        for number, row in enumerate(csv.reader(f, delimiter="|", quoting=csv.QUOTE_NONE), start=1):
            if not row or row == [""]:
                continue
            clip = row[0].strip() or f"line {number}"
            if len(row) not in (2, 3):
                skipped.append(Skipped(clip, f"{path.name} line {number} has {len(row)} columns; "
                                             "expected 2 (id|text) or 3 (id|text|normalized_text)"))
                continue
            text = (row[2] if len(row) == 3 and row[2].strip() else row[1]).strip()
            entries.append(Entry(clip, _ljspeech_audio(path.parent / WAVS, clip), text))
    return Listing(path, entries, skipped)


def _read_manifest(path: Path) -> Listing:
    entries, skipped = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            skipped.append(Skipped(f"line {number}", f"{path.name} line {number} is not JSON ({exc})"))
            continue
        audio = record.get("audio") if isinstance(record, dict) else None
        if not isinstance(audio, str) or not audio:
            skipped.append(Skipped(f"line {number}", f"{path.name} line {number} names no \"audio\" file"))
            continue
        text = record.get("text")
        entries.append(Entry(audio, path.parent / audio, text.strip() if isinstance(text, str) else ""))
    return Listing(path, entries, skipped)
