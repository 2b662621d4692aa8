"""The voices a server speaks, and voices made from a reference clip.

    GET    /v1/audio/voices            every voice: the model's (with its ``language`` where known), OpenAI's
                                       names for them, cloned voices (adapters), reference voices
                                       (``kind: "reference"``)
    POST   /v1/audio/voices            multipart ``name``, ``file``, optional ``text``: a voice from a clip
    DELETE /v1/audio/voices/{name}     forget a reference voice

Uploading and deleting answer only to the admin key, as the adapter routes
do. A clip without ``text`` is transcribed by the server's Whisper, and the
transcript comes back so the uploader can check it. The voice is kept in the
server's voices folder, and, on a server registered with a fleet, in the
fleet's Redis, so every server speaks it. A name another voice holds (the
model's, an adapter, a reference voice here or in the fleet), or that another
upload is taking, is a 409.

A speech request's own clip (``reference_audio``) is made into a voice as an
upload is, through `InlineReferences`: cached, and bounded apart from uploads.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from starlette.exceptions import HTTPException

from lyre.server.auth import require_admin
from lyre.server.body_limit import LimitedBodyRoute
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.inline_references import inline_key
from lyre.server.state import ServerState
from lyre.server.routes.transcriptions import as_http_error, upload_body_limit, upload_limit
from lyre.stt import AudioError, TranscribeOptions, TranscriberBusy, TranscriberClosed, TranscriptionFailed
from lyre.stt.audio import decode_file
from lyre.tts import Synthesizer
from lyre.tts.reference_store import ReferenceVoices, new_claim
from lyre.tts.reference_voices import (MAX_FILE_SECONDS, MAX_SECONDS, MIN_SECONDS, ReferenceRejected, ReferenceVoice,
                                      read_reference_clip)

__all__ = ["VOICES_PATH", "inline_reference", "is_admin", "router"]

VOICES_PATH = "/v1/audio/voices"
_OFF = "uploading voices is off on this server (start it with --admin-key)"


def _before_body(request: Request) -> None:
    """Uploads and deletes: the admin key, and a server not shutting down, before any of the body is read."""
    if request.method != "GET":
        state: ServerState = request.app.state.lyre
        state.require_tts()
        require_admin(request, _OFF)
        if state.draining:
            raise HTTPException(503, "server is shutting down")


class VoiceRoute(LimitedBodyRoute):
    """A clip over the upload limit (``--stt-max-file-bytes``'s) is refused before it is read."""

    body_limit = staticmethod(upload_body_limit)
    before_body = staticmethod(_before_body)


router = APIRouter(route_class=VoiceRoute)
_ERRORS = {400: error_doc("A field is missing or wrong; the message names it"),
           401: error_doc("Missing or wrong admin key"), 404: error_doc("No such voice, or no admin key set"),
           409: error_doc("Another voice holds the name, or another upload of it took it first"),
           413: error_doc("The clip is over the server's upload limit")}


def is_admin(method: str, path: str) -> bool:
    """The requests of this module that check the admin key rather than the API key."""
    return (method == "POST" and path == VOICES_PATH) or (method == "DELETE" and path.startswith(VOICES_PATH + "/"))


@router.get(VOICES_PATH, responses={404: error_doc("Text to speech is not served by this server")})
async def list_voices(request: Request) -> dict[str, list[dict[str, Any]]]:
    """The model's voices, OpenAI's voice names with the voice each stands for (``alias_of``), each with the
    ``language`` it speaks (an ISO 639-1 code, where the model's checkpoint or voices.json says), the cloned
    voices (LoRA adapters, ``adapter: true``) with the speaker name their prompts use, then the voices made
    from a reference clip (``kind: "reference"``) with their duration and text."""
    tts = request.app.state.lyre.require_tts()
    cloned = [{"id": a["name"], "name": a["name"], "adapter": True, "speaker": a["speaker"],
               "resident": a["resident"]} for a in (tts.adapters.listing() if tts.adapters else [])]
    references = [v.describe() for v in tts.references] if tts.references is not None else []
    return {"voices": [*tts.voices.listing(), *cloned, *references]}


@router.post(VOICES_PATH, status_code=201, responses=_ERRORS)
async def add_voice(
    request: Request,
    name: Annotated[str, Form(max_length=200, description="The voice's name: 1-64 letters, digits, '_', '.', '-'")],
    file: Annotated[UploadFile, File(description=f"{MIN_SECONDS:g}-{MAX_SECONDS:g} s of one person speaking, in any "
                                                 "format ffmpeg reads")],
    text: Annotated[str | None, Form(max_length=2000, description="What the clip says; default: the server's "
                                                                  "Whisper transcribes it")] = None,
) -> dict[str, Any]:
    """Make a voice from a clip; it is spoken at once by every route that takes a voice. A 409 when another
    voice (the model's, an adapter, a reference voice here or in the fleet) holds the name, or another upload
    of it takes it first."""
    state: ServerState = request.app.state.lyre
    tts = state.require_tts()
    if (refused := _refusal(tts)) is not None:
        raise InvalidParam(refused, "file")
    references: ReferenceVoices = tts.references  # type: ignore[assignment]
    fleet = state.fleet_voices
    try:
        with references.reserving(name):  # a second upload of the name, here, is refused until this one ends
            if fleet is not None:
                await fleet.check_new(name)  # before the clip is read: what the fleet holds is refused at once
            limit, too_large = upload_limit(request)
            if file.size is not None and file.size > limit:
                raise HTTPException(413, too_large)
            voice = await make_voice(state, tts, name, await file.read(), text)
            claim = new_claim()
            if fleet is not None:
                await fleet.claim(voice, claim)  # of two servers taking the name at once, Redis picks one
            try:
                await asyncio.to_thread(references.add, voice, claim)
            except BaseException:
                if fleet is not None:
                    await fleet.withdraw(name, claim)
                raise
    except ReferenceRejected as exc:
        raise InvalidParam(str(exc), exc.param) from None
    return voice.describe()


@router.delete(VOICES_PATH + "/{name}", responses=_ERRORS)
async def delete_voice(name: str, request: Request) -> dict[str, Any]:
    """Forget a reference voice (on every server of the fleet); streams speaking it finish as they began."""
    state: ServerState = request.app.state.lyre
    tts = state.require_tts()
    if tts.references is None or name not in tts.references:
        raise HTTPException(404, f"no reference voice named {name!r}")
    tts.references.remove(name)
    if state.fleet_voices is not None:
        await state.fleet_voices.withdraw(name)
    return {"name": name, "deleted": True}


def _refusal(tts: Synthesizer) -> str | None:
    """Why ``tts`` speaks no reference voices; None when it does."""
    return "this server speaks no reference voices" if tts.references is None else tts.references_refused()


async def make_voice(state: ServerState, tts: Synthesizer, name: str, data: bytes, text: str | None,
                     ) -> ReferenceVoice:
    """A reference voice from a clip's bytes: decoded (no more than `MAX_FILE_SECONDS` of it), cut, checked,
    transcribed when ``text`` is missing, SNAC-encoded. ReferenceRejected naming the part at fault: ``file``
    (the clip) or ``text``."""
    clip = await asyncio.to_thread(read_reference_clip, data)
    transcribed = not (text and text.strip())
    if transcribed:
        text = await _transcribe(state, data)
    return await asyncio.to_thread(tts.make_reference, name, clip, text or "", transcribed)


async def _transcribe(state: ServerState, data: bytes) -> str:
    if state.stt is None:
        raise ReferenceRejected("text: what the clip says is needed (this server has no speech to text to hear "
                                "it: start it with --stt)", "text")
    try:
        audio = await asyncio.to_thread(decode_file, data, "file", MAX_FILE_SECONDS)
        transcript = await state.stt.transcribe(audio, TranscribeOptions(), session="voices")
    except (AudioError, TranscriberBusy, TranscriberClosed, TranscriptionFailed) as exc:
        raise as_http_error(exc) from exc
    if not transcript.text.strip():
        raise ReferenceRejected("file: Whisper heard no words in the clip; send what it says as text", "file")
    return transcript.text.strip()


_INLINE = {"file": "reference_audio", "text": "reference_text"}


async def inline_reference(state: ServerState, tts: Synthesizer, audio: str, text: str | None) -> ReferenceVoice:
    """A request's own reference (``reference_audio``, base64, and ``reference_text``), checked as an upload;
    made once per clip and text (`InlineReferences`), and a 429 when too many are being made."""
    if (refused := _refusal(tts)) is not None:
        raise InvalidParam(f"reference_audio: {refused}", "reference_audio")
    try:
        data = base64.b64decode(audio, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidParam("reference_audio: not base64 (send the clip's file, base64-encoded)",
                           "reference_audio") from None
    try:
        return await state.inline_references.get(inline_key(data, text),
                                                 lambda: make_voice(state, tts, "inline", data, text))
    except ReferenceRejected as exc:
        param = _INLINE.get(exc.param, exc.param)
        raise InvalidParam(param + str(exc).removeprefix(exc.param), param) from None
