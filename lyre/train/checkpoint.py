"""Checkpoints of a training run, each written whole or not at all, and the finished adapter put in place.

A checkpoint is a folder ``checkpoint-<step>`` holding the LoRA weights
(``adapter.safetensors``) and the rest of the run's state (``state.pt``:
optimizer, schedule, random generators, losses, the settings it was made
with). It is written under a temporary name and renamed, so a run killed at
any moment leaves only complete checkpoints behind.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

__all__ = ["Checkpoint", "latest_checkpoint", "publish_folder", "remove_checkpoints", "save_checkpoint"]

_NAME = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS, _STATE = "adapter.safetensors", "state.pt"


class Checkpoint:
    """A complete checkpoint on disk."""

    def __init__(self, path: Path, step: int) -> None:
        self.path = path
        self.step = step

    def adapter(self) -> dict[str, torch.Tensor]:
        return load_file(self.path / _WEIGHTS)

    def state(self) -> dict[str, Any]:
        return torch.load(self.path / _STATE, map_location="cpu", weights_only=True)


def _checkpoints(work: Path) -> list[Checkpoint]:
    found = [(m, p) for p in work.glob("checkpoint-*") if p.is_dir() and (m := _NAME.match(p.name))]
    return sorted((Checkpoint(p, int(m[1])) for m, p in found), key=lambda c: c.step)


def latest_checkpoint(work: Path) -> Checkpoint | None:
    """The checkpoint of the furthest step in ``work``, if any."""
    found = _checkpoints(work) if work.is_dir() else []
    return found[-1] if found else None


def save_checkpoint(work: Path, step: int, adapter: dict[str, torch.Tensor], state: dict[str, Any]) -> Checkpoint:
    """Write step ``step``'s checkpoint atomically, then drop the older ones."""
    folder = work / f"checkpoint-{step:07d}"

    def write(tmp: Path) -> None:
        save_file({k: v.detach().cpu().contiguous() for k, v in adapter.items()}, tmp / _WEIGHTS)
        torch.save(state, tmp / _STATE)

    publish_folder(folder, write, replace=True)
    for old in _checkpoints(work):
        if old.step < step:
            shutil.rmtree(old.path, ignore_errors=True)
    return Checkpoint(folder, step)


def remove_checkpoints(work: Path) -> None:
    for old in _checkpoints(work) if work.is_dir() else []:
        shutil.rmtree(old.path, ignore_errors=True)


def publish_folder(target: Path, write: Callable[[Path], None], replace: bool = False) -> None:
    """Make ``target`` by calling ``write(tmp)`` on an empty sibling folder, then renaming it into place.

    Readers see no folder or a complete one. With ``replace``, a folder
    already at ``target`` is swapped out and deleted; without, FileExistsError.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.partial-", dir=target.parent))
    tmp.chmod(0o755)  # mkdtemp makes it private; the folder is to be served
    old: Path | None = None
    try:
        write(tmp)
        if target.exists():
            if not replace:
                raise FileExistsError(f"'{target}' already exists")
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            os.replace(target, old / target.name)  # a folder cannot be renamed over a non-empty one
        try:
            os.replace(tmp, target)
        except OSError:
            if old is not None:  # put the old folder back rather than lose both
                os.replace(old / target.name, target)
            raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
