"""Which LoRA adapters the engine knows, and which sit in its bank's slots. Plain Python, no tensors.

An adapter is known by name and folder; it is resident while it holds a
slot. It cannot be evicted while it is held (by a running request, or by a
caller that leased it for a stream of several requests) or pinned. When a
slot is needed and none is free, the least recently used unheld, unpinned
adapter leaves.

A slot can also be reserved: taken by no resident adapter and used by no
request, while an adapter's weights are copied into it or a departed one's
are zeroed. Copying off the engine's lock is safe because of this: nothing
can start on a reserved slot, and nothing else is put there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["AdapterBusy", "AdapterEntry", "AdapterInUse", "AdapterRegistry", "AdapterStats", "UnknownAdapter"]


class UnknownAdapter(ValueError):
    """No adapter of that name is known."""


class AdapterBusy(RuntimeError):
    """Every adapter slot holds an adapter in use (or pinned): none can be loaded now."""


class AdapterInUse(RuntimeError):
    """The adapter has requests running on it; unload it with force to cancel them."""


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
    serial: int = 0  # this registration's number: a name registered again (other weights) gets another

    @property
    def salt(self) -> str:
        """Keys its requests' KV cache by these weights, not just this name."""
        return f"adapter:{self.serial}:{self.name}"

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
    """Known adapters and the ``slots`` they share; at most ``max_bytes`` of them resident (or on their way in)."""

    def __init__(self, slots: int, max_bytes: int | None = None) -> None:
        self.slots = slots
        self.max_bytes = max_bytes
        self.entries: dict[str, AdapterEntry] = {}
        self.reserved: dict[int, int] = {}  # slot -> bytes on their way into it (0: being emptied)
        self.stats = AdapterStats()
        self._serial = 0

    def register(self, name: str, path: Path, speaker: str, pin: bool = False) -> AdapterEntry:
        if not name or "/" in name:
            raise ValueError(f"adapter name {name!r}: a non-empty name without '/'")
        if name in self.entries:
            raise ValueError(f"adapter {name!r} is already registered (from {self.entries[name].path})")
        self._serial += 1
        entry = self.entries[name] = AdapterEntry(name, path, speaker, pinned=pin, serial=self._serial)
        return entry

    def get(self, name: str) -> AdapterEntry:
        entry = self.entries.get(name)
        if entry is None:
            raise UnknownAdapter(f"unknown adapter {name!r}; known: {', '.join(sorted(self.entries)) or 'none'}")
        return entry

    def known(self, entry: AdapterEntry) -> bool:
        """Whether ``entry`` is still registered (not unloaded, nor replaced by another of its name)."""
        return self.entries.get(entry.name) is entry

    @property
    def resident(self) -> list[AdapterEntry]:
        return [e for e in self.entries.values() if e.resident]

    @property
    def resident_bytes(self) -> int:
        return sum(e.nbytes for e in self.resident)

    def place(self, entry: AdapterEntry, nbytes: int) -> tuple[int, list[AdapterEntry]]:
        """A slot for ``entry`` (``nbytes`` of weights) and the adapters to evict to make room.

        Nothing changes until `reserve` or `install` acts on the answer.
        AdapterBusy when the slots (or the byte budget) are all taken by
        adapters in use, pinned, or on their way in.
        """
        used = {e.slot for e in self.resident} | set(self.reserved)
        free = [s for s in range(self.slots) if s not in used]
        evictable = sorted((e for e in self.resident if not e.pinned and e.holders == 0), key=lambda e: e.last_used)
        evict: list[AdapterEntry] = []
        taken = self.resident_bytes + sum(self.reserved.values())

        def room() -> bool:
            fits = self.max_bytes is None or taken - sum(e.nbytes for e in evict) + nbytes <= self.max_bytes
            return bool(free or evict) and fits

        while not room():
            if not evictable:
                raise AdapterBusy(f"no room for adapter {entry.name!r}: every adapter slot (or the byte budget) "
                                  "holds adapters in use or pinned; retry when a stream ends")
            evict.append(evictable.pop(0))
        slot = free[0] if free else evict[0].slot
        assert slot is not None
        return slot, evict

    def reserve(self, entry: AdapterEntry, nbytes: int) -> int:
        """`place` ``entry``, evict what that takes, and reserve the slot for its weights; the slot."""
        slot, evicted = self.place(entry, nbytes)
        self._evict(evicted)
        self.reserved[slot] = nbytes
        return slot

    def install(self, entry: AdapterEntry, slot: int, nbytes: int, evicted: list[AdapterEntry],
                seconds: float) -> None:
        """``entry`` is resident in ``slot`` from now on (its weights are there); ``evicted`` have left."""
        self._evict(evicted)
        self.reserved.pop(slot, None)
        entry.slot, entry.nbytes = slot, nbytes
        entry.last_used = time.monotonic()
        self.stats.loads += 1
        self.stats.load_seconds += seconds

    def free(self, slot: int) -> None:
        """End a reservation that did not end in `install` (a failed load, a slot emptied after `forget`)."""
        self.reserved.pop(slot, None)

    def hold(self, entry: AdapterEntry) -> None:
        entry.holders += 1
        entry.last_used = time.monotonic()

    def release(self, entry: AdapterEntry) -> None:
        entry.holders = max(0, entry.holders - 1)
        entry.last_used = time.monotonic()

    def forget(self, entry: AdapterEntry) -> int | None:
        """Unregister ``entry``; the slot it held, which stays reserved until `free` (its weights are to be
        zeroed first), or None."""
        del self.entries[entry.name]
        slot, entry.slot = entry.slot, None
        if slot is not None:
            self.reserved[slot] = 0
        return slot

    def _evict(self, evicted: list[AdapterEntry]) -> None:
        for victim in evicted:
            victim.slot = None
            self.stats.evictions += 1
