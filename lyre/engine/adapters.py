"""Cloned voices into the engine and out again: loading LoRA adapters into the bank, leasing, unloading.

The engine owns only the plain registry (`lyre.engine.adapter_registry`) and
holds an adapter for each request that runs on it; this module knows the
engine only as an `AdapterHost`. Only bookkeeping happens under the engine's
lock, so a load never blocks the event loop's calls into the engine, and no
step waits for more than one layer of an adapter:

1. read the folder and check it, in the bank's dtype too (a worker thread);
2. under the lock: pick a slot (evicting unheld adapters) and reserve it: no
   request can start on it, and none runs on it;
3. copy the weights into it on the engine's thread without the lock, as
   many decoder layers between two steps as a short pause allows (a worker
   thread copying meanwhile would compete with the step for the CPU and the
   GIL; on a GPU the weights are staged on the device first, so the copy is
   one pause of device-to-device copies);
4. under the lock: the adapter is resident; requests may use it.

A load runs as a task of its own whose result every caller asking for that
adapter shares; a caller that gives up (a hang-up, a barge-in) cancels only
its own wait.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from lyre.engine.adapter_registry import (AdapterBusy, AdapterEntry, AdapterInUse, AdapterRegistry, AdapterStats,
                                          UnknownAdapter)
from lyre.models.config import LlamaConfig
from lyre.models.lora import LoraBank, PreparedAdapter
from lyre.models.peft_folder import VOICE_FILE, AdapterError, is_there, read_peft_adapter
from lyre.engine.sequence import Request

__all__ = ["AdapterBusy", "AdapterEntry", "AdapterHost", "AdapterInUse", "AdapterLease", "AdapterRegistry",
           "AdapterStats", "EngineAdapters", "UnknownAdapter", "speaker_of"]


def speaker_of(folder: Path, name: str) -> str:
    """The speaker name an adapter's prompts use: ``lyre_voice.json``'s, else the adapter's name."""
    path = folder / VOICE_FILE
    if not is_there(path, Path.is_file):
        return name
    try:
        speaker = json.loads(path.read_text()).get("speaker", name)
    except (json.JSONDecodeError, AttributeError) as exc:
        raise AdapterError(f"{path}: expected a JSON object with a 'speaker' name ({exc})") from None
    if not isinstance(speaker, str) or not speaker.strip():
        raise AdapterError(f"{path}: 'speaker' must be a non-empty string")
    return speaker


class AdapterHost(Protocol):
    """What adapters need of the engine that serves them (`lyre.engine.Engine` is one)."""

    @property
    def lock(self) -> threading.Condition:
        """Held to read or change what the engine's loop reads between steps (the registry among it)."""

    async def between_steps(self, op: Callable[[], None]) -> None:
        """Run ``op`` on the engine's thread between two steps, under the lock; raise what it raises."""

    async def in_slices(self, job: Iterator[None]) -> None:
        """Run ``job`` on the engine's thread without the lock, a few ``next`` between two steps."""

    def fail_requests(self, which: Callable[[Request], bool], message: str) -> None:
        """End the requests ``which`` picks with an error saying ``message`` (between steps)."""


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
    """Registering, loading, leasing and unloading the adapters of one engine (``host``) and its ``bank``."""

    def __init__(self, host: AdapterHost, registry: AdapterRegistry, bank: LoraBank, model: LlamaConfig) -> None:
        self._host, self.registry, self._bank, self._model = host, registry, bank, model
        self._loading: dict[str, tuple[AdapterEntry, asyncio.Task[None]]] = {}

    @property
    def lock(self) -> threading.Condition:
        return self._host.lock

    def register(self, name: str, path: str | Path, pin: bool = False) -> AdapterEntry:
        path = Path(path).expanduser()
        speaker = speaker_of(path, name)  # read before taking the lock: a slow disk holds up nobody's step
        with self.lock:
            return self.registry.register(name, path, speaker, pin)

    async def lease(self, name: str) -> AdapterLease:
        """Make ``name`` resident (loading it on a miss) and hold it until the lease is released."""
        with self.lock:
            entry = self.registry.get(name)
            if entry.resident:
                self.registry.hold(entry)
                self.registry.stats.hits += 1
                return AdapterLease(self, entry, hit=True)
        await self.load(name)
        with self.lock:
            if not entry.resident or not self.registry.known(entry):  # evicted or unloaded since it loaded
                raise AdapterBusy(f"adapter {name!r} was evicted as it loaded; retry")
            self.registry.hold(entry)
            self.registry.stats.misses += 1
        return AdapterLease(self, entry, hit=False)

    async def load(self, name: str) -> None:
        """Read, check and install ``name`` (AdapterError naming the problem, AdapterBusy without room).

        Callers asking for the same adapter share one load; cancelling a caller
        cancels its wait, never the load the others wait for.
        """
        with self.lock:
            entry = self.registry.get(name)
            if entry.resident:
                return
        loading = self._loading.get(name)
        # A task runs on the loop that started it: a caller on another loop (or for a re-registered adapter of the
        # same name) starts its own.
        if loading is None or loading[0] is not entry or loading[1].get_loop() is not asyncio.get_running_loop():
            task = asyncio.create_task(self._load(entry), name=f"load adapter {name}")
            self._loading[name] = (entry, task)
            task.add_done_callback(lambda done: self._loaded(name, done))
        else:
            task = loading[1]
        await asyncio.shield(task)

    def _loaded(self, name: str, task: asyncio.Task[None]) -> None:
        if self._loading.get(name, (None, None))[1] is task:
            del self._loading[name]
        if not task.cancelled():
            task.exception()  # retrieved: the callers still waiting re-raise it; with none left, nobody need

    async def _load(self, entry: AdapterEntry) -> None:
        started = time.perf_counter()
        prepared, nbytes = await asyncio.to_thread(self._read, entry)
        with self.lock:
            if not self.registry.known(entry):
                raise UnknownAdapter(f"adapter {entry.name!r} was unloaded while it loaded")
            slot = self.registry.reserve(entry, nbytes)
        await self._host.in_slices(self._fill(entry, slot, prepared, nbytes, started))

    def _read(self, entry: AdapterEntry) -> tuple[PreparedAdapter, int]:
        """On a worker thread: the folder read, checked, and converted to the bank's dtype; its bytes as read."""
        weights = read_peft_adapter(entry.name, entry.path, self._model, self._bank.rank)
        return self._bank.prepare(weights), weights.nbytes

    def _fill(self, entry: AdapterEntry, slot: int, prepared: PreparedAdapter, nbytes: int,
              started: float) -> Iterator[None]:
        """In slices on the engine's thread: copy into the reserved ``slot``, then make ``entry`` resident
        there; on any failure (or when the engine drops the job) the slot is free again."""
        resident = False
        try:
            yield from self._bank.fill(slot, prepared)
            with self.lock:
                if not self.registry.known(entry):
                    raise UnknownAdapter(f"adapter {entry.name!r} was unloaded while it loaded")
                self.registry.install(entry, slot, nbytes, [], time.perf_counter() - started)
                resident = True
        finally:
            if not resident:
                with self.lock:
                    self.registry.free(slot)

    def release(self, entry: AdapterEntry) -> None:
        with self.lock:
            self.registry.release(entry)

    def set_pinned(self, name: str, pinned: bool) -> AdapterEntry:
        with self.lock:
            entry = self.registry.get(name)
            entry.pinned = pinned
            return entry

    async def unload(self, name: str, force: bool = False) -> None:
        """Forget ``name``; AdapterInUse while requests run on it, unless ``force`` (which ends them with an error)."""
        with self.lock:
            entry = self.registry.get(name)
            if entry.holders and not force:
                raise AdapterInUse(f"adapter {name!r} has {entry.holders} stream(s) running on it; "
                                   "unload with force to cancel them")
        emptied: list[int] = []

        def forget() -> None:  # between two steps: after it, no step runs on the adapter's slot
            self._host.fail_requests(lambda req: req.adapter == name, f"adapter {name!r} was unloaded")
            if self.registry.known(entry):
                slot = self.registry.forget(entry)
                if slot is not None:
                    emptied.append(slot)

        await self._host.between_steps(forget)
        if emptied:
            await self._host.in_slices(self._empty(emptied[0]))

    def _empty(self, slot: int) -> Iterator[None]:
        """In slices on the engine's thread: zero a forgotten adapter's slot, then let it be used again."""
        try:
            yield from self._bank.empty(slot)
        finally:
            with self.lock:
                self.registry.free(slot)
