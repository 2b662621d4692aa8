"""The reference voices a pipeline speaks: in memory, and each as one JSON file in a folder so they survive a
restart (written whole or not at all).

Names are one namespace with the pipeline's other voices: a name that the
model's voices, their aliases or an adapter hold is refused (`VoiceNameTaken`),
and so is one uploaded here already, or being uploaded now (`reserving`).

A voice kept on disk carries a claim: an id its upload was given, which tells
this upload from any other of the same name. The fleet (`lyre.fleet.voices`)
decides with it which of two uploads of a name holds it, and whether a delete
was of this upload or of an earlier one, without comparing hosts' clocks.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lyre import orpheus
from lyre.common.files import write_atomic
from lyre.tts.reference_voices import ReferenceVoice, check_name, check_reference, parse_json
from lyre.tts.voices import VoiceNameTaken

__all__ = ["ReferenceVoices", "new_claim"]

log = logging.getLogger("lyre.tts")


def new_claim() -> str:
    """An id for one upload: no two uploads, here or on another server, get the same one."""
    return uuid.uuid4().hex


class ReferenceVoices:
    """The reference voices a pipeline speaks: in memory, and in ``folder`` (None: memory only).

    ``holder(name)`` says what other voice of the pipeline holds a name (the
    model's, an alias, an adapter), or None. ``check(voice)`` is what a voice
    made elsewhere must pass to be spoken here (ReferenceRejected): those read
    from the folder, and those from the fleet (`check`).
    """

    def __init__(self, folder: Path | None, holder: Callable[[str], str | None] = lambda name: None,
                 check: Callable[[ReferenceVoice], None] = lambda voice: None) -> None:
        self.folder = folder
        self._holder = holder
        self._check = check
        self._voices: dict[str, ReferenceVoice] = {}
        self._claims: dict[str, str] = {}  # name -> claim, of the voices kept on disk here (the rest: the fleet's)
        self._reserved: set[str] = set()  # names being uploaded here now
        self._prefixes: dict[str, tuple[str, list[int]]] = {}  # name -> (digest, prompt prefix ids)
        self._lock = threading.Lock()  # uploads finish on worker threads
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            for path in sorted(folder.glob("*.json")):
                self._read(path)

    def _read(self, path: Path) -> None:
        try:
            data = parse_json(path.read_bytes())
            voice = ReferenceVoice.from_record(data)
            self.check(voice)
        except (OSError, ValueError) as exc:
            log.warning("reference voice file %s skipped: %s", path, exc)
            return
        held = self._holder(voice.name) or (None if path.stem == voice.name else "not its file's name")
        if held is not None:
            log.warning("reference voice file %s skipped: its name %r is %s", path, voice.name, held)
            return
        self._voices[voice.name] = voice
        # A file written before uploads had claims: taken as published, so a delete the fleet records removes it.
        self._claims[voice.name] = data.get("claim", "") if isinstance(data.get("claim", ""), str) else ""

    def __contains__(self, name: object) -> bool:
        return name in self._voices

    def __iter__(self) -> Iterator[ReferenceVoice]:
        return iter(sorted(self._voices.values(), key=lambda v: v.name))

    def __len__(self) -> int:
        return len(self._voices)

    def get(self, name: str) -> ReferenceVoice:
        return self._voices[name]

    def check(self, voice: ReferenceVoice) -> None:
        """ReferenceRejected unless ``voice`` could have been uploaded here: `check_reference`, then what the
        pipeline needs of it (its text free of control tokens, its turn within a request's positions)."""
        check_reference(voice)
        self._check(voice)

    def check_new(self, name: str) -> None:
        """ReferenceRejected (param ``name``) unless ``name`` can name a voice; VoiceNameTaken when another
        voice holds it, or an upload of it is under way here."""
        check_name(name)
        held = self._holder(name)
        if held is not None:
            raise VoiceNameTaken.held(name, held)
        if name in self._voices:
            raise VoiceNameTaken(f"name: reference voice {name!r} exists; delete it first to replace it")
        if name in self._reserved:
            raise VoiceNameTaken(f"name: a reference voice named {name!r} is being uploaded to this server now")

    @contextmanager
    def reserving(self, name: str) -> Iterator[None]:
        """Hold ``name`` for an upload under way: another upload of it is refused (`check_new`) and the fleet's
        syncs leave it alone until the block ends."""
        with self._lock:
            self.check_new(name)
            self._reserved.add(name)
        try:
            yield
        finally:
            with self._lock:
                self._reserved.discard(name)

    def add(self, voice: ReferenceVoice, claim: str) -> None:
        """Keep ``voice``, uploaded under ``claim`` (`reserving` its name): its file first, written whole, then
        in memory. VoiceNameTaken when another voice took the name meanwhile. Blocking (the file is synced to
        disk): call it from a worker thread."""
        with self._lock:
            held = self._holder(voice.name)
            if held is not None or voice.name in self._voices:
                raise VoiceNameTaken(f"name: {voice.name!r} became {held or 'a reference voice'} on this server "
                                     "while the clip was encoded")
            if self.folder is not None:
                write_atomic(self.folder / f"{voice.name}.json", _file_text(voice, claim))
                self._claims[voice.name] = claim
            self._voices[voice.name] = voice

    def claim_of(self, name: str) -> str | None:
        """The claim of the upload this server keeps on disk as ``name``; None for a voice held for the fleet."""
        return self._claims.get(name)

    def remove(self, name: str) -> ReferenceVoice:
        """Forget ``name`` (KeyError if there is none), its file too."""
        with self._lock:
            voice = self._voices.pop(name)
            self._prefixes.pop(name, None)
            if self._claims.pop(name, None) is not None and self.folder is not None:
                (self.folder / f"{name}.json").unlink(missing_ok=True)
            return voice

    def on_disk(self) -> list[str]:
        """The voices this server keeps in its folder (uploaded here), not those it holds for the fleet."""
        return sorted(self._claims)

    def put(self, voice: ReferenceVoice) -> str | None:
        """Hold ``voice`` as the fleet has it (memory only), in place of any of its name here (a file too: the
        fleet's upload of a name wins over this server's). Why not, when it is not held: the name is another
        voice's here, or an upload of it is under way here."""
        if voice.name in self._reserved:
            return "an upload of that name is under way here"
        if (held := self._holder(voice.name)) is not None:
            return f"the name is {held} on this server"
        if voice.name in self._claims:
            self.remove(voice.name)
        self._voices[voice.name] = voice
        return None

    def drop(self, name: str) -> None:
        """Forget ``name`` (the fleet deleted it), its file too; an upload of it under way here is left alone."""
        if name in self._voices and name not in self._reserved:
            self.remove(name)

    def prefix(self, voice: ReferenceVoice, tokenizer: orpheus.TextTokenizer) -> list[int]:
        """``voice.prefix_ids``, built once per voice."""
        cached = self._prefixes.get(voice.name)
        if cached is None or cached[0] != voice.digest:
            cached = (voice.digest, voice.prefix_ids(tokenizer))
            self._prefixes[voice.name] = cached
        return cached[1]


def _file_text(voice: ReferenceVoice, claim: str) -> str:
    return json.dumps({**voice.record(), "claim": claim})
