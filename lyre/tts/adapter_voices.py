"""Cloned voices as LoRA adapters: a voice named after an adapter speaks through it.

`AdapterVoices` is what the server manages: register a PEFT folder under a
name, load it (read and copied into a free adapter slot on worker threads,
while streams play), unload it, pin it. A speech request whose voice is an adapter's name leases
the adapter for its whole stream (loading it first on a miss, which its time
to first audio then includes) and prompts with the adapter's speaker name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lyre.engine.adapter_registry import AdapterBusy, AdapterEntry, AdapterInUse, UnknownAdapter
from lyre.engine.adapters import AdapterLease, EngineAdapters
from lyre.models.peft_folder import AdapterError
from lyre.tts.voices import VoiceNameTaken, Voices

__all__ = ["AdapterBusy", "AdapterError", "AdapterInUse", "AdapterVoices", "UnknownAdapter"]


class AdapterVoices:
    """The adapters a TTS pipeline serves as voices, beside the model's own."""

    def __init__(self, adapters: EngineAdapters, voices: Voices,
                 holder: Callable[[str], str | None] = lambda name: None) -> None:
        """``holder(name)``: what other voice of the pipeline holds ``name`` (a reference voice), or None."""
        self._adapters = adapters
        self._voices = voices
        self._holder = holder

    def __contains__(self, name: object) -> bool:
        return name in self._adapters.registry.entries

    def check_new(self, name: str) -> None:
        """VoiceNameTaken when another voice holds ``name``: the model's, a reference voice, another adapter."""
        held = self._voices.holder(name) or self._holder(name) or (
            "a cloned voice (adapter)" if name in self else None)
        if held is not None:
            raise VoiceNameTaken.held(name, held)

    def register(self, name: str, path: str | Path, pin: bool = False) -> None:
        """Know ``name`` as the adapter in ``path`` (not loaded yet); VoiceNameTaken as `check_new` says."""
        self.check_new(name)
        self._adapters.register(name, path, pin)

    async def add(self, name: str, path: str | Path, pin: bool = False) -> None:
        """Register and load ``name``; on any failure it is not kept (AdapterError says why)."""
        self.register(name, path, pin)
        try:
            await self._adapters.load(name)
        except BaseException:
            await self._adapters.unload(name, force=True)
            raise

    async def lease(self, name: str) -> AdapterLease:
        return await self._adapters.lease(name)

    def speaker(self, name: str) -> str:
        return self._adapters.registry.get(name).speaker

    async def remove(self, name: str, force: bool = False) -> None:
        await self._adapters.unload(name, force)

    def pin(self, name: str, pinned: bool) -> None:
        self._adapters.set_pinned(name, pinned)

    def listing(self) -> list[dict[str, Any]]:
        """Every known adapter: where it is from, whether it is resident or pinned, its bytes, its last use."""
        with self._adapters.lock:
            return [self._describe(e) for e in sorted(self._adapters.registry.entries.values(), key=lambda e: e.name)]

    def describe(self, name: str) -> dict[str, Any]:
        """One adapter as `listing` shows it (UnknownAdapter if there is none of that name)."""
        with self._adapters.lock:
            return self._describe(self._adapters.registry.get(name))

    @staticmethod
    def _describe(e: AdapterEntry) -> dict[str, Any]:
        return {"name": e.name, "path": str(e.path), "speaker": e.speaker, "resident": e.resident,
                "pinned": e.pinned, "bytes": e.nbytes, "streams": e.holders,
                "last_used_s_ago": round(time.monotonic() - e.last_used, 3)}

    def stats(self) -> dict[str, float]:
        with self._adapters.lock:
            registry = self._adapters.registry
            s = registry.stats
            return {"hits": s.hits, "misses": s.misses, "loads": s.loads, "evictions": s.evictions,
                    "load_seconds": s.load_seconds, "resident": len(registry.resident),
                    "resident_bytes": registry.resident_bytes, "slots": registry.slots}
