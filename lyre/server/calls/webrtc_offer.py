"""The caller's side of ``POST /v1/realtime/calls``: its SDP offer and session settings, read and checked."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

__all__ = ["EVENTS_CHANNEL", "Unsupported", "no_common_codec", "read_offer"]

EVENTS_CHANNEL = "oai-events"
_MAX_SDP_BYTES = 64 * 1024


class Unsupported(ValueError):
    """A body that is not an offer at all (415)."""


async def read_offer(request: Request) -> tuple[str, dict[str, Any] | None]:
    """The offer's SDP and the optional session object; ValueError naming the part at fault."""
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    session: Any = None
    if kind == "application/sdp":
        body = await request.body()
        if len(body) > _MAX_SDP_BYTES:
            raise ValueError(f"sdp: the offer is over {_MAX_SDP_BYTES // 1024} KiB")
        sdp = body.decode("utf-8", "replace")
    elif kind == "multipart/form-data":
        form = await request.form(max_files=2, max_fields=4, max_part_size=_MAX_SDP_BYTES)
        sdp, session = await _text(form.get("sdp")), await _text(form.get("session"))
        if sdp is None:
            raise ValueError("sdp: the form has no sdp part (the SDP offer)")
        if session is not None:
            try:
                session = json.loads(session)
            except json.JSONDecodeError as exc:
                raise ValueError(f"session: not JSON ({exc})") from None
            if not isinstance(session, dict):
                raise ValueError("session: must be a JSON object (the session of a session.update)")
    else:
        raise Unsupported(f"send the SDP offer as application/sdp, or as multipart/form-data with an sdp part "
                           f"(and an optional session), not {kind or 'no content type'}")
    _check_sdp(sdp)
    return sdp, session


async def _text(part: Any) -> str | None:
    if part is None or isinstance(part, str):
        return part
    return (await part.read()).decode("utf-8", "replace")


def _check_sdp(sdp: str) -> None:
    """A readable offer with an audio section, or ValueError saying what is wrong."""
    from aiortc.sdp import SessionDescription  # with the first call, not with the server

    if not sdp.strip():
        raise ValueError("sdp: the offer is empty")
    try:
        parsed = SessionDescription.parse(sdp)
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"sdp: not a valid SDP offer ({exc or type(exc).__name__})") from None
    audio = [media for media in parsed.media if media.kind == "audio"]
    if not audio:
        raise ValueError("sdp: the offer has no audio (m=audio) section: a call needs the caller's microphone")
    if audio[0].direction not in (None, "sendrecv"):
        raise ValueError(f"sdp: the offer's audio is {audio[0].direction}; a call's is sendrecv (the caller both "
                         "speaks and listens)")
    mids = [media.rtp.muxId for media in parsed.media]
    if not all(mids) or len(set(mids)) < len(mids):
        raise ValueError("sdp: every media section of the offer needs an a=mid of its own (a browser's offer "
                         "has them)")
    if not any(media.kind == "application" for media in parsed.media):
        raise ValueError(f"sdp: the offer has no data channel: open one named {EVENTS_CHANNEL!r} before the offer")


def no_common_codec(sdp: str) -> str:
    """Why aiortc refused an offer (read and checked already) whose audio has no codec it speaks."""
    from aiortc.codecs import CODECS
    from aiortc.sdp import SessionDescription

    def names(codecs: list[Any]) -> str:
        return ", ".join(f"{c.mimeType.partition('/')[2]}/{c.clockRate}" for c in codecs) or "none"
    audio = next(media for media in SessionDescription.parse(sdp).media if media.kind == "audio")
    return (f"sdp: no audio codec in common: the offer has {names(audio.rtp.codecs)}; lyre speaks "
            f"{names(CODECS['audio'])}")
