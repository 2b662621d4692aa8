"""``POST /v1/audio/alignments``: forced alignment, an audio file and the text it speaks in, word times out."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, File, Form, Request, UploadFile
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from lyre.server.aligner import AlignerUnavailable
from lyre.server.errors import InvalidParam, error_doc
from lyre.server.state import ServerState
from lyre.server.routes.transcriptions import LimitedUpload, as_http_error, upload_limit
from lyre.stt import (
    MAX_ALIGN_SECONDS,
    SAMPLE_RATE,
    AudioError,
    AudioTooLong,
    PhoneAlignmentFailed,
    TextTooLongToAlign,
    TranscriberBusy,
    TranscriberClosed,
    TranscriptionFailed,
    decode_file,
    written_words,
)

__all__ = ["ALIGNMENTS_PATH", "MAX_ALIGN_CHARS", "MAX_WORDS_PER_SECOND", "router"]

ALIGNMENTS_PATH = "/v1/audio/alignments"
MAX_ALIGN_CHARS = 5000
# Fast speech runs at 4-5 words a second; more words than this per second of audio cannot all be in it.
MAX_WORDS_PER_SECOND = 8.0


class AlignedWordJson(BaseModel):
    text: str
    start: float
    end: float


class AlignmentJson(BaseModel):
    words: list[AlignedWordJson]
    duration: float


router = APIRouter(route_class=LimitedUpload)


@router.post(
    ALIGNMENTS_PATH,
    response_model=AlignmentJson,
    responses={
        404: error_doc("Forced alignment is off on this server (--aligner off)"),
        422: error_doc("The words could not be aligned to the audio (--aligner phones only)"),
        413: error_doc("The file is over the server's upload limit"),
        503: error_doc("The server is shutting down, or its aligner cannot be loaded"),
    },
)
async def create_alignment(
    request: Request,
    file: Annotated[UploadFile, File(description="Audio in any format ffmpeg reads, at most 30 s")],
    text: Annotated[str, Form(max_length=MAX_ALIGN_CHARS, description="What the audio says. Words come back "
                                                                     "as written; tags such as <laugh> are not "
                                                                     "words")],
    language: Annotated[str, Form(max_length=20, description="ISO-639-1 code (default: en)")] = "en",
) -> AlignmentJson:
    state: ServerState = request.app.state.lyre
    if state.aligner is None or state.aligner.off:
        raise HTTPException(404, "forced alignment is off on this server (started with --aligner off)")
    limit, too_large = upload_limit(request)
    if file.size is not None and file.size > limit:
        raise HTTPException(413, too_large)
    words = written_words(text, language.strip().lower() or None)
    if not words:
        raise InvalidParam("text: no words to align (empty, or only tags and punctuation)", "text")
    language = language.strip().lower() or "en"
    try:
        await state.aligner.check_language(language)  # may load Whisper, to know the languages it speaks
    except AlignerUnavailable as exc:
        raise HTTPException(503, str(exc)) from None
    except ValueError as exc:
        raise InvalidParam(str(exc), "language") from None
    try:  # decoding stops past the longest audio that can be aligned
        audio = await asyncio.to_thread(decode_file, await file.read(), file.filename or "file", MAX_ALIGN_SECONDS)
    except AudioTooLong as exc:
        raise InvalidParam(f"file: at most {MAX_ALIGN_SECONDS:g} s of audio can be aligned; {exc}", "file") from None
    except AudioError as exc:
        raise as_http_error(exc) from None
    seconds = audio.size / SAMPLE_RATE
    if seconds > MAX_ALIGN_SECONDS:
        raise InvalidParam(f"file: at most {MAX_ALIGN_SECONDS:g} s of audio can be aligned, got {seconds:.1f} s",
                           "file")
    if len(words) > MAX_WORDS_PER_SECOND * seconds + 2:
        raise InvalidParam(f"text: {len(words)} words cannot all be spoken in {seconds:.2f} s of audio", "text")
    client = request.client.host if request.client else None
    try:
        found = await state.aligner.align(audio, words, language, session=("align", client))
    except AlignerUnavailable as exc:
        raise HTTPException(503, str(exc)) from None
    except TextTooLongToAlign as exc:
        raise InvalidParam(str(exc), "text") from None
    except PhoneAlignmentFailed as exc:  # --aligner phones, which has no Whisper to fall back to
        raise HTTPException(422, f"the words could not be aligned to the audio: {exc}") from exc
    except (TranscriberBusy, TranscriberClosed, TranscriptionFailed) as exc:
        raise as_http_error(exc) from exc
    return AlignmentJson(words=[AlignedWordJson(text=w.text, start=w.start, end=w.end) for w in found.words],
                         duration=round(found.duration, 3))
