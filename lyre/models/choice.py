"""Which model and codec to load: the ones named, the codec the model needs, or the built-in demo.

Orpheus was trained on one codec, SNAC 24 kHz (``hubertsiuzdak/snac_24khz``), so a
model named without a codec gets that codec, or the one a ``lyre.json`` beside its
weights names, found the way a hub id given as the model is: the local Hugging Face
cache, else the hub. The demo's random SNAC goes only with the demo model, or where
it is asked for by name (``demo``). Paired with a real model it turns speech into noise,
and nothing about that would point at the codec; so when the right codec cannot be
had, the answer is an error that names it, never a quiet fall back to random weights.

    choice = choose_weights("canopylabs/orpheus-3b-0.1-ft", None)
    choice.codec.local()  # .../models--hubertsiuzdak--snac_24khz/snapshots/<commit>

Each choice is announced on stderr once per process: what was taken, and from where.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lyre.common.device import resolve_device
from lyre.models.folder import HubUnavailable, ModelFolderError, looks_like_hub_id, resolve

__all__ = [
    "CODEC_FILES",
    "DEMO",
    "MODEL_FILES",
    "ModelChoice",
    "ORPHEUS_CODEC",
    "SETTINGS_FILE",
    "Weights",
    "add_device_arg",
    "add_model_args",
    "choose_codec",
    "choose_model",
    "choose_weights",
    "resolve_device_args",
]

DEMO = "demo"  # names the built-in demo model or codec (random weights)
ORPHEUS_CODEC = "hubertsiuzdak/snac_24khz"  # the codec every Orpheus checkpoint was trained on
SETTINGS_FILE = "lyre.json"  # beside a model's weights: {"codec": "<folder or hub id>"}
MODEL_FILES = ("config.json", "tokenizer.json")  # and the weights, which the loader finds
CODEC_FILES = ("config.json", "pytorch_model.bin")

# How a set of weights came to be chosen (Weights.origin), as the start-up summary words it.
_ORIGINS = {
    "named": "named",
    "default": "none named",
    "lyre.json": "named in the model's lyre.json",
    "in memory": "built in memory",
}
_CODEC_HOW_TO = ("pass a local folder holding its config.json and pytorch_model.bin, "
                 "e.g. --codec /path/to/snac_24khz")
_RANDOM = "random weights: it makes noise, not speech"

# Messages already printed by this process: a server checks its choice before it loads, then loads it.
_announced: set[str] = set()


@dataclass(frozen=True)
class Weights:
    """One set of weights: the name it goes by, its local folder, how it was chosen, whether it is random."""

    name: str  # as named, the hub id, or "demo"
    folder: Path | None  # None: built in memory rather than loaded from a folder
    origin: str  # one of "named", "default", "lyre.json", "in memory"
    random: bool = False  # random weights (the demo's): noise, not speech

    def __post_init__(self) -> None:
        if self.origin not in _ORIGINS:
            raise ValueError(f"origin must be one of {', '.join(_ORIGINS)}, got {self.origin!r}")

    def local(self) -> Path:
        """The local folder to load from (ValueError for weights built in memory, which have none)."""
        if self.folder is None:
            raise ValueError(f"{self.name} was built in memory: there is no folder to load it from")
        return self.folder

    @classmethod
    def in_memory(cls, name: str, random: bool) -> Weights:
        """Weights a caller built itself (a benchmark's random model), for the start-up summary."""
        return cls(name, None, "in memory", random)

    def describe(self) -> str:
        """One line: ``name (how it was chosen[; random weights...]) from FOLDER``."""
        how = _ORIGINS[self.origin]
        if self.name == ORPHEUS_CODEC:
            how += "; the codec Orpheus was trained on"
        if self.random:
            how += f"; {_RANDOM}"
        where = f" from {self.folder}" if self.folder is not None and str(self.folder) != self.name else ""
        return f"{self.name} ({how}){where}"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "folder": None if self.folder is None else str(self.folder),
                "origin": self.origin, "random": self.random}


@dataclass(frozen=True)
class ModelChoice:
    """The Orpheus model and the SNAC codec to load together."""

    model: Weights
    codec: Weights


def choose_weights(model: str | os.PathLike[str] | None, codec: str | os.PathLike[str] | None) -> ModelChoice:
    """The model as named (None: the demo), and its codec: as named, else the one the model needs.

    Raises ModelFolderError (a ValueError) naming what could not be had and how to pass a folder.
    """
    chosen = choose_model(model)
    return ModelChoice(chosen, choose_codec(codec, chosen))


def choose_model(model: str | os.PathLike[str] | None) -> Weights:
    """A model folder or hub id, resolved to a local folder; None or ``demo``: the built-in demo."""
    if model is None or os.fspath(model) == DEMO:
        from lyre.models.demo import demo_model  # writes the demo on first use; needs torch

        folder = demo_model().model
        if model is None:
            _announce(f"no model named; using the built-in demo model at {folder.parent} ({_RANDOM})")
        else:
            _announce(f"using the built-in demo model at {folder.parent}, as named ({_RANDOM})")
        return Weights(DEMO, folder, "default" if model is None else "named", random=True)
    return Weights(os.fspath(model), resolve(model, required=MODEL_FILES), "named")


def choose_codec(codec: str | os.PathLike[str] | None, model: Weights) -> Weights:
    """The codec for ``model``: ``codec`` as named (``demo``: the demo's random SNAC); None: the model's own.

    The model's own is the demo's codec for the demo model; for any other, the codec
    its folder's ``lyre.json`` names, else SNAC 24 kHz from the Hugging Face cache or hub.
    """
    if codec is not None:
        name = os.fspath(codec)
        if name == DEMO:
            folder = _demo_codec()
            if not model.random:
                _announce(f"codec 'demo': using the built-in demo codec at {folder} (random weights: "
                          "the audio is noise, whatever the model)")
            return Weights(DEMO, folder, "named", random=True)
        return Weights(name, _codec_folder(name, f"the codec '{name}'"), "named")
    if model.random and model.name == DEMO:
        return Weights(DEMO, _demo_codec(), "default", random=True)  # announced with the demo model
    named = _settings_codec(model.folder) if model.folder is not None else None
    if named is not None:
        value, where, settings = named
        if where == DEMO:
            folder = _demo_codec()
            _announce(f"no codec named; using the built-in demo codec at {folder}, as {settings} says "
                      "(random weights: the audio is noise, whatever the model)")
            return Weights(DEMO, folder, "lyre.json", random=True)
        folder = _codec_folder(where, f"{settings} names the codec '{value}', which")
        _announce(f"no codec named; using {value} from {folder}, as {settings} says")
        return Weights(value, folder, "lyre.json")
    folder = _codec_folder(ORPHEUS_CODEC, "no codec was named, and the one this model needs, "
                                          f"SNAC 24 kHz ({ORPHEUS_CODEC}),", default=True)
    _announce(f"no codec named; using SNAC 24 kHz ({ORPHEUS_CODEC}) from {folder}")
    return Weights(ORPHEUS_CODEC, folder, "default")


def _demo_codec() -> Path:
    from lyre.models.demo import demo_model

    return demo_model().codec


def _settings_codec(model_folder: Path) -> tuple[str, str, Path] | None:
    """``lyre.json``'s codec, if it names one: (as written, where to find it, the file's path).

    A relative path is taken against the model folder, so a folder (or hub repo)
    can carry its codec beside its weights; ``owner/name`` with no such folder there is a hub id.
    """
    path = model_folder / SETTINGS_FILE
    if not path.is_file():
        return None
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ModelFolderError(f"'{path}' is not valid JSON: {error}") from None
    if not isinstance(settings, dict):
        raise ModelFolderError(f"'{path}' holds a {type(settings).__name__}, not a JSON object")
    value = settings.get("codec")
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ModelFolderError(f"'{path}': \"codec\" must be a folder or a hub id, got {value!r}")
    if value == DEMO:
        return value, DEMO, path
    given = Path(value).expanduser()
    if given.is_absolute():
        return value, str(given), path
    beside = model_folder / given
    where = value if looks_like_hub_id(value) and not beside.exists() else str(beside)
    return value, where, path


def _codec_folder(name: str, subject: str, default: bool = False) -> Path:
    """``name`` resolved to a folder holding SNAC's files; the errors name the codec and how to pass one."""
    try:
        return resolve(name, required=CODEC_FILES, kind="codec")
    except HubUnavailable as error:
        problem = f"could not be fetched from the Hugging Face hub ({error.reason})"
    except ModelFolderError as error:
        problem = f"cannot be used: {error}"
    fetch = (f"fetch it once where the hub is reachable (hf download {ORPHEUS_CODEC} puts it in the cache "
             "lyre reads), or ") if default else ""
    demo = "; --codec demo runs the built-in random codec (noise)" if default else ""
    raise ModelFolderError(f"{subject} {problem}; {fetch}{_CODEC_HOW_TO}{demo}") from None


def _announce(message: str) -> None:
    if message not in _announced:
        _announced.add(message)
        print(f"lyre: {message}", file=sys.stderr)


# -- the command line: every command that loads the model names it, its codec and its device alike --


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """``--model``, ``--codec`` and ``--device``, as `choose_weights` and `resolve_device_args` read them."""
    parser.add_argument("--model", help="Orpheus model folder or hub id, or demo (default: the built-in demo model, "
                                        "random weights that make noise)")
    parser.add_argument("--codec", help="SNAC 24 kHz folder or hub id, or demo for the demo's random one "
                                        f"(default: the codec the model needs: its {SETTINGS_FILE}'s, else "
                                        f"{ORPHEUS_CODEC} from the Hugging Face cache or hub)")
    add_device_arg(parser)


def add_device_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N] (default: auto, the first CUDA "
                                                         "device torch sees, else the CPU; bf16 on CUDA)")


def resolve_device_args(args: argparse.Namespace) -> None:
    """``--device`` and ``--stt-device``, where a command has them, made concrete (`lyre.common.device.resolve_device`)."""
    for name in ("device", "stt_device"):
        if getattr(args, name, None) is not None:
            try:
                setattr(args, name, resolve_device(getattr(args, name)))
            except ValueError as exc:
                raise ValueError(f"--{name.replace('_', '-')}: {exc}") from None
