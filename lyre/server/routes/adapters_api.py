"""Admin routes for cloned voices (LoRA adapters): list, register and load, unload, pin.

    GET    /v1/adapters                      every known adapter: resident, pinned, bytes, last use
    POST   /v1/adapters {"name", "path", "pin"}   register and load a PEFT folder the server can read (409 for a
                                             name another voice holds: the model's, a reference voice's)
    DELETE /v1/adapters/{name}[?force=true]  unload (409 while streams run on it, unless forced)
    POST   /v1/adapters/{name}/pin, /unpin

They answer only to the admin key (``--admin-key`` or ``$LYRE_ADMIN_KEY``,
separate from the user key), and are off (404) when none is set.

With ``--adapter-root DIR`` a folder is read only from inside DIR (a relative
path is taken from it): a path that resolves elsewhere, through ``..`` or a
symlink, is refused with one message whatever lies there, so the admin key
cannot read the rest of the machine, nor learn what exists on it.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException

from lyre.server.auth import require_admin
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.state import ServerState
from lyre.tts import AdapterBusy, AdapterError, AdapterInUse, AdapterVoices, UnknownAdapter

__all__ = ["ADMIN_PREFIX", "router"]

ADMIN_PREFIX = "/v1/adapters"
router = APIRouter()
_ERRORS = {401: error_doc("Missing or wrong admin key"), 404: error_doc("No such adapter, or no admin key set"),
           409: error_doc("Streams are running on the adapter, or its name is another voice's"),
           429: error_doc("Every adapter slot is in use")}


class AdapterRequest(BaseModel):
    name: str = Field(..., min_length=1, max_length=100, pattern=r"^[^/\s]+$")
    path: str = Field(..., min_length=1, max_length=4096,
                      description="A PEFT LoRA folder the server can read (inside --adapter-root, when it is set)")
    pin: bool = False


def _admin(request: Request) -> AdapterVoices:
    """The adapters, once the request carries the admin key; 404 when adapters or the key are off."""
    state: ServerState = request.app.state.lyre
    off = "adapter administration is off on this server (start it with --admin-key, and adapter slots: --max-adapters)"
    tts = state.require_tts()
    if tts.adapters is None:
        raise HTTPException(404, off)
    require_admin(request, off)
    return tts.adapters


def _inside_root(root: str, path: str) -> str:
    """``path`` (relative to ``root``, or absolute) resolved, when it and every file in it lie inside ``root``.

    Anything else is one InvalidParam that does not echo the path: a folder outside, a symlink that leads out,
    one that loops, or one that does not exist there all read the same.
    """
    outside = InvalidParam("path: the adapter folder must be inside this server's adapter root (--adapter-root); "
                           "give it relative to the root", "path")
    base = Path(root).expanduser().resolve()
    try:
        folder = (base / path).resolve()
        if not folder.is_relative_to(base):
            raise outside
        if folder.is_dir() and any(not child.resolve().is_relative_to(base) for child in folder.iterdir()):
            raise outside  # a file linked from elsewhere would be read from there
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python before 3.13)
        raise outside from None
    return str(folder)


def _known(adapters: AdapterVoices, name: str) -> None:
    if name not in adapters:
        raise HTTPException(404, f"unknown adapter {name!r}")


@router.get(ADMIN_PREFIX, responses=_ERRORS)
async def list_adapters(request: Request) -> dict[str, Any]:
    """Every known adapter, resident or not."""
    adapters = _admin(request)
    return {"object": "list", "data": adapters.listing(), "stats": adapters.stats()}


@router.post(ADMIN_PREFIX, status_code=201, responses=_ERRORS)
async def add_adapter(body: AdapterRequest, request: Request) -> dict[str, Any]:
    """Register and load an adapter folder; refused (and not kept) with the reason when it cannot be served,
    and with a 409 when another voice (the model's, a reference voice, another adapter) holds its name."""
    adapters = _admin(request)
    adapters.check_new(body.name)  # before the folder is looked at
    root: str | None = request.app.state.lyre.config.adapter_root
    path = body.path if root is None else await asyncio.to_thread(_inside_root, root, body.path)
    try:
        await adapters.add(body.name, path, body.pin)
    except AdapterError as exc:
        raise InvalidParam(str(exc), "path") from None
    except AdapterBusy as exc:
        raise HTTPException(429, str(exc), headers={"Retry-After": "1"}) from None
    return adapters.describe(body.name)


@router.delete(ADMIN_PREFIX + "/{name}", responses=_ERRORS)
async def delete_adapter(name: str, request: Request, force: bool = False) -> dict[str, Any]:
    """Unload and forget an adapter; with ``force``, streams running on it end with an error."""
    adapters = _admin(request)
    _known(adapters, name)
    try:
        await adapters.remove(name, force)
    except AdapterInUse as exc:
        raise HTTPException(409, str(exc)) from None
    except UnknownAdapter as exc:
        raise HTTPException(404, str(exc)) from None
    return {"name": name, "deleted": True}


@router.post(ADMIN_PREFIX + "/{name}/pin", responses=_ERRORS)
async def pin_adapter(name: str, request: Request) -> dict[str, Any]:
    """Keep the adapter resident: it is never evicted for another."""
    return _set_pin(request, name, True)


@router.post(ADMIN_PREFIX + "/{name}/unpin", responses=_ERRORS)
async def unpin_adapter(name: str, request: Request) -> dict[str, Any]:
    return _set_pin(request, name, False)


def _set_pin(request: Request, name: str, pinned: bool) -> dict[str, Any]:
    adapters = _admin(request)
    _known(adapters, name)
    adapters.pin(name, pinned)
    return adapters.describe(name)
