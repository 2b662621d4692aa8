"""Which LoRA adapters the engine knows, and which sit in its bank's slots. Plain Python, no tensors.

An adapter is known by name and folder; it is resident while it holds a
slot. It cannot be evicted while it is held (by a running request, or by a
caller that leased it for a stream of several requests) or pinned. When a
slot is needed and none is free, the least recently used unheld, unpinned
adapter leaves.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lyre.engine.config import LlamaConfig
from lyre.engine.lora import LoraBank
from lyre.engine.peft_folder import VOICE_FILE, AdapterError, read_peft_adapter

if TYPE_CHECKING:
    from lyre.engine.engine import Engine

__all__ = ["AdapterBusy", "AdapterEntry", "AdapterInUse", "AdapterLease", "AdapterRegistry", "AdapterStats",
           "EngineAdapters", "UnknownAdapter", "speaker_of"]


def speaker_of(folder: Path, name: str) -> str:
    """The speaker name an adapter's prompts use: ``lyre_voice.json``'s, else the adapter's name."""
    path = folder / VOICE_FILE
    if not path.is_file():
        return name
    try:
        speaker = json.loads(path.read_text()).get("speaker", name)
    except (json.JSONDecodeError, AttributeError) as exc:
        raise AdapterError(f"{path}: expected a JSON object with a 'speaker' name ({exc})") from None
    if not isinstance(speaker, str) or not speaker.strip():
        raise AdapterError(f"{path}: 'speaker' must be a non-empty string")
    return speaker


class UnknownAdapter(ValueError):
    """No adapter of that name is known."""


class AdapterBusy(RuntimeError):
    """Every adapter slot holds an adapter in use (or pinned): none can be loaded now."""


@dataclass
class AdapterEntry:
    name: str
    path: Path
    speaker: str
    pinned: bool = False
    slot: int | None = None  # None: not resident
    nbytes: int = 0  # of its weights, unpadded, once read
    holders: int = 0  # running requests and leases
    last_used: float = field(default_factory=time.monotonic)

    @property
    def resident(self) -> bool:
        return self.slot is not None


@dataclass
class AdapterStats:
    hits: int = 0  # requests whose adapter was resident
    misses: int = 0  # requests that had to wait for it to load
    loads: int = 0
    evictions: int = 0
    load_seconds: float = 0.0


class AdapterRegistry:
    """Known adapters and the ``slots`` they share; at most ``max_bytes`` of them resident."""

    def __init__(self, slots: int, max_bytes: int | None = None) -> None:
        self.slots = slots
        self.max_bytes = max_bytes
        self.entries: dict[str, AdapterEntry] = {}
        self.stats = AdapterStats()

    def register(self, name: str, path: Path, speaker: str, pin: bool = False) -> AdapterEntry:
        if not name or "/" in name:
            raise ValueError(f"adapter name {name!r}: a non-empty name without '/'")
        if name in self.entries:
            raise ValueError(f"adapter {name!r} is already registered (from {self.entries[name].path})")
        entry = self.entries[name] = AdapterEntry(name, path, speaker, pinned=pin)
        return entry

    def get(self, name: str) -> AdapterEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise UnknownAdapter(f"unknown adapter {name!r}; known: {', '.join(sorted(self.entries)) or 'none'}")
        return entry

    @property
    def resident(self) -> list[AdapterEntry]:
        return [e for e in self.entries.values() if e.resident]

    @property
    def resident_bytes(self) -> int:
        return sum(e.nbytes for e in self.resident)

    def place(self, entry: AdapterEntry, nbytes: int) -> tuple[int, list[AdapterEntry]]:
        """A slot for ``entry`` (``nbytes`` of weights) and the adapters to evict to make room.

        Nothing changes until `install` is called with the answer. AdapterBusy
        when the slots (or the byte budget) are all taken by adapters in use.
        """
        used = {e.slot for e in self.resident}
        free = [s for s in range(self.slots) if s not in used]
        evictable = sorted((e for e in self.resident if not e.pinned and e.holders == 0), key=lambda e: e.last_used)
        evict: list[AdapterEntry] = []

        def room() -> bool:
            fits = self.max_bytes is None or self.resident_bytes - sum(e.nbytes for e in evict) + nbytes <= self.max_bytes
            return bool(free or evict) and fits

        while not room():
            if not evictable:
                raise AdapterBusy(f"no room for adapter {entry.name!r}: every adapter slot (or the byte budget) "
                                  "holds adapters in use or pinned; retry when a stream ends")
            evict.append(evictable.pop(0))
        slot = free[0] if free else evict[0].slot
        assert slot is not None
        return slot, evict

    def install(self, entry: AdapterEntry, slot: int, nbytes: int, evicted: list[AdapterEntry],
                seconds: float) -> None:
        for victim in evicted:
            victim.slot = None
            self.stats.evictions += 1
        entry.slot, entry.nbytes = slot, nbytes
        entry.last_used = time.monotonic()
        self.stats.loads += 1
        self.stats.load_seconds += seconds

    def hold(self, entry: AdapterEntry) -> None:
        entry.holders += 1
        entry.last_used = time.monotonic()

    def release(self, entry: AdapterEntry) -> None:
        entry.holders = max(0, entry.holders - 1)
        entry.last_used = time.monotonic()

    def forget(self, entry: AdapterEntry) -> None:
        del self.entries[entry.name]
        entry.slot = None


class AdapterInUse(RuntimeError):
    """The adapter has requests running on it; unload it with force to cancel them."""


class AdapterLease:
    """Holds an adapter resident for a stream of requests; `release` when the stream ends."""

    def __init__(self, adapters: EngineAdapters, entry: AdapterEntry, hit: bool) -> None:
        self._adapters, self.entry, self.hit = adapters, entry, hit
        self._released = False

    @property
    def speaker(self) -> str:
        return self.entry.speaker

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._adapters.release(self.entry)


class EngineAdapters:
    """The engine's adapters: registering, loading off the engine thread, installing between steps.

    Reading and checking a folder runs on a worker thread; copying it into the
    bank runs on the engine's thread between two steps, so running streams
    never pause and no step sees half an adapter.
    """

    def __init__(self, engine: Engine, bank: LoraBank, registry: AdapterRegistry, model: LlamaConfig) -> None:
        self._engine, self._bank, self.registry, self._model = engine, bank, registry, model
        self._loading: dict[str, asyncio.Future[None]] = {}

    @property
    def lock(self) -> Any:
        return self._engine.lock

    def register(self, name: str, path: str | Path, pin: bool = False) -> AdapterEntry:
        path = Path(path).expanduser()
        with self._engine.lock:
            return self.registry.register(name, path, speaker_of(path, name), pin)

    async def lease(self, name: str) -> AdapterLease:
        """Make ``name`` resident (loading it on a miss) and hold it until the lease is released."""
        with self._engine.lock:
            entry = self.registry.get(name)
            if entry.resident:
                self.registry.hold(entry)
                self.registry.stats.hits += 1
                return AdapterLease(self, entry, hit=True)
        await self.load(name)
        with self._engine.lock:
            if not entry.resident:  # evicted or unloaded between its install and now
                raise AdapterBusy(f"adapter {name!r} was evicted as it loaded; retry")
            self.registry.hold(entry)
            self.registry.stats.misses += 1
        return AdapterLease(self, entry, hit=False)

    async def load(self, name: str) -> None:
        """Read, check and install ``name`` (AdapterError naming the problem, AdapterBusy without room)."""
        with self._engine.lock:
            entry = self.registry.get(name)
            if entry.resident:
                return
        pending = self._loading.get(name)
        if pending is not None:
            return await asyncio.shield(pending)
        loop = asyncio.get_running_loop()
        self._loading[name] = done = loop.create_future()
        try:
            started = time.perf_counter()
            weights = await asyncio.to_thread(read_peft_adapter, name, entry.path, self._model, self._bank.rank)

            def install() -> None:  # on the engine's thread, between steps, under its lock
                slot, evicted = self.registry.place(entry, weights.nbytes)
                for victim in evicted:
                    self._bank.clear(victim.slot)  # type: ignore[arg-type]
                self._bank.install(slot, weights)
                self.registry.install(entry, slot, weights.nbytes, evicted, time.perf_counter() - started)

            await self._engine.between_steps(install)
            done.set_result(None)
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()  # retrieved: waiters re-raise it, nobody else need
            raise
        finally:
            del self._loading[name]

    def release(self, entry: AdapterEntry) -> None:
        with self._engine.lock:
            self.registry.release(entry)

    def set_pinned(self, name: str, pinned: bool) -> AdapterEntry:
        with self._engine.lock:
            entry = self.registry.get(name)
            entry.pinned = pinned
            return entry

    async def unload(self, name: str, force: bool = False) -> None:
        """Forget ``name``; AdapterInUse while requests run on it, unless ``force`` (which ends them with an error)."""
        with self._engine.lock:
            entry = self.registry.get(name)
            if entry.holders and not force:
                raise AdapterInUse(f"adapter {name!r} has {entry.holders} stream(s) running on it; "
                                   "unload with force to cancel them")

        def forget() -> None:
            self._engine.fail_requests(lambda req: req.adapter == name, f"adapter {name!r} was unloaded")
            if entry.slot is not None:
                self._bank.clear(entry.slot)
            self.registry.forget(entry)

        await self._engine.between_steps(forget)
