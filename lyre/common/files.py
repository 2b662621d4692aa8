"""lyre's files: where its cache lives, and files written whole or not at all (a reader never sees half of one,
and a crash leaves the old one)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["cache_root", "write_atomic"]

_CACHE_ENV = "LYRE_CACHE_DIR"
_DEFAULT_CACHE = "~/.cache/lyre"


def cache_root() -> Path:
    """lyre's cache folder: ``$LYRE_CACHE_DIR``, else ``~/.cache/lyre``."""
    return Path(os.environ.get(_CACHE_ENV) or _DEFAULT_CACHE).expanduser()


def write_atomic(path: Path, text: str) -> None:
    """``text`` into ``path`` through a temporary file beside it, synced to disk, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
