"""Hugging Face style model folders: find one, then read its config, weights and tokenizer.

A model is named either by a local folder or by a hub id (``owner/name``),
which is fetched into the Hugging Face cache. Everything downstream sees only
a local ``Path``, so the demo model, a hand-made folder and a real download all
take the same loading path.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from safetensors import safe_open
from tokenizers import Tokenizer

if TYPE_CHECKING:  # safe_open(framework="pt") imports torch when weights are read; speech to text never does
    import torch

__all__ = [
    "HubUnavailable",
    "ModelFolderError",
    "resolve",
    "looks_like_hub_id",
    "load_config",
    "iter_safetensors",
    "load_tokenizer",
    "CONFIG_FILE",
    "WEIGHTS_FILE",
    "WEIGHTS_INDEX_FILE",
    "TOKENIZER_FILE",
]

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
TOKENIZER_FILE = "tokenizer.json"

# What a serving process needs from a hub repo: configs, weights, tokenizer
# files. Skips READMEs, images and the original (non-HF) checkpoints.
HUB_ALLOW_PATTERNS = ["*.json", "*.safetensors", "*.bin", "*.txt", "*.model"]

# owner/name with the characters the hub allows; exactly one slash.
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")

# huggingface_hub reads HF_HUB_OFFLINE once at import; we read it per call so a
# process (or a test) that sets it later still stays off the network.
_TRUTHY = {"1", "on", "yes", "true"}

_HOW_TO_PASS_A_FOLDER = (
    "pass a local folder holding config.json, model.safetensors (or sharded "
    "safetensors with model.safetensors.index.json) and tokenizer.json, "
    "e.g. --model /path/to/folder"
)


class ModelFolderError(ValueError):
    """A model folder or hub id that cannot be used; the message says which and why."""


class HubUnavailable(ModelFolderError):
    """A hub id that could not be fetched; ``reason`` says why, so a caller can word its own advice."""

    def __init__(self, message: str, repo_id: str, reason: str) -> None:
        super().__init__(message)
        self.repo_id = repo_id
        self.reason = reason


def resolve(name: str | os.PathLike[str], required: Sequence[str] = (), kind: str = "model") -> Path:
    """Return the local folder for ``name``, fetching it from the hub if it is a hub id.

    ``name`` is an existing local directory (used as is) or a hub id such as
    ``canopylabs/orpheus-3b-0.1-ft``. Every file in ``required`` (relative to
    the folder) must exist. Raises ``ModelFolderError`` otherwise (``HubUnavailable``
    for a hub id that cannot be fetched); ``kind`` ("model", "codec") names the folder in messages.
    """
    text = os.fspath(name)
    path = Path(text).expanduser()
    if path.is_dir():
        folder = path
    elif path.exists():
        raise ModelFolderError(f"{kind} path '{text}' is a file, not a folder")
    elif looks_like_hub_id(text):
        folder = _fetch_from_hub(text)
    else:
        raise ModelFolderError(f"{kind} folder '{text}' does not exist")
    missing = [f for f in required if not (folder / f).is_file()]
    if missing:
        raise ModelFolderError(
            f"{kind} folder '{folder}' (from '{text}') lacks {', '.join(missing)}"
        )
    return folder


def load_config(folder: Path) -> dict:
    """Read ``folder/config.json`` as a dict."""
    path = folder / CONFIG_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelFolderError(f"model folder '{folder}' has no {CONFIG_FILE}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ModelFolderError(f"'{path}' is not valid JSON: {error}") from None
    if not isinstance(config, dict):
        raise ModelFolderError(f"'{path}' holds a {type(config).__name__}, not a JSON object")
    return config


def iter_safetensors(folder: Path) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every weight in the folder, one tensor at a time.

    Reads ``model.safetensors``, or every shard listed in the ``weight_map`` of
    ``model.safetensors.index.json``. Only one tensor is materialised per step,
    so peak memory stays near the size of the largest tensor.
    """
    for shard in _weight_files(folder):
        with safe_open(shard, framework="pt") as f:
            for key in f.keys():
                yield key, f.get_tensor(key)


def load_tokenizer(folder: Path) -> Tokenizer:
    """Load ``folder/tokenizer.json`` with the ``tokenizers`` library."""
    path = folder / TOKENIZER_FILE
    if not path.is_file():
        raise ModelFolderError(f"model folder '{folder}' has no {TOKENIZER_FILE}")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as error:  # tokenizers raises a bare Exception on bad files
        raise ModelFolderError(f"'{path}' is not a valid tokenizer: {error}") from None


def looks_like_hub_id(text: str) -> bool:
    """Whether ``text`` reads as a hub id (``owner/name``) rather than a path."""
    return not text.startswith(("/", ".", "~")) and _HUB_ID.fullmatch(text) is not None


def _offline() -> bool:
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any((flag or "").strip().lower() in _TRUTHY for flag in flags)


def _fetch_from_hub(repo_id: str) -> Path:
    # Imported here: only hub ids need it, and it is slow to import.
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(
            repo_id, allow_patterns=HUB_ALLOW_PATTERNS, local_files_only=_offline()
        )
    except (OSError, ValueError) as error:  # every hub error derives from one of these
        reason = _hub_failure_reason(error)
        raise HubUnavailable(
            f"could not fetch '{repo_id}' from the Hugging Face hub ({reason}); {_HOW_TO_PASS_A_FOLDER}",
            repo_id, reason,
        ) from error
    return Path(folder)


def _hub_failure_reason(error: Exception) -> str:
    from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError

    # GatedRepoError is a RepositoryNotFoundError too: both mean "no access".
    if isinstance(error, RepositoryNotFoundError):
        return "no such repository, or it is private or gated"
    if isinstance(error, LocalEntryNotFoundError):
        where = "offline mode is on" if _offline() else "the hub is unreachable"
        return f"{where} and it is not in the local cache"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__


def _weight_files(folder: Path) -> list[Path]:
    single = folder / WEIGHTS_FILE
    index = folder / WEIGHTS_INDEX_FILE
    if single.is_file():
        return [single]
    if not index.is_file():
        raise ModelFolderError(
            f"model folder '{folder}' has neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE}"
        )
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ModelFolderError(f"'{index}' is not a valid index ({error!r})") from None
    # dict.fromkeys keeps the index's order while dropping repeats.
    shards = [folder / name for name in dict.fromkeys(weight_map.values())]
    missing = [s.name for s in shards if not s.is_file()]
    if missing:
        raise ModelFolderError(
            f"model folder '{folder}' lacks {', '.join(missing)}, listed in {WEIGHTS_INDEX_FILE}"
        )
    return shards
