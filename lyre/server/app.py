"""The FastAPI app: ``create_app(config)`` loads the models in its lifespan."""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from lyre.agent import LocalThinker, RemoteThinker, SmartTurn, Thinker, find_smart_turn
from lyre.common.api_keys import RequireKey
from lyre.llm import Chat, ChatOptions, ChatServing
from lyre.server.calls import twilio_stream, webrtc
from lyre.server.routes import adapters_api, alignments, audio_speech, completions, transcriptions, voices_api
from lyre.server.sockets import realtime_socket, tts_socket
from lyre.server.admission import Admission
from lyre.server.auth import is_admin
from lyre.server.aligner import Aligner
from lyre.server.config import ServerConfig, sip_address
from lyre.server.errors import document_errors, error_response, install_error_handlers
from lyre.server.metrics import Metrics
from lyre.server.registration import join_fleet, share_voices
from lyre.server.sessions import RealtimeSessions
from lyre.server.state import ServerState
from lyre.server.summary import build_summary, kv_cache_json, summary_json, summary_text
from lyre.stt import DEFAULT_MODEL as STT_DEFAULT_MODEL
from lyre.stt import SAMPLE_RATE, STTConfig, TranscribeOptions, Transcriber
from lyre.tts import TTS, PacingPolicy, SpeechOptions, Synthesizer, TTSConfig
from lyre.tts.cuts import WARM_UP

__all__ = ["create_app"]

log = logging.getLogger("lyre.server")

# Reachable without the API key: liveness, readiness and the playground page itself.
_OPEN_PATHS = frozenset({"/health", "/ready", "/"})
_DRAIN_GRACE_S = 30.0
# The names /v1/models lists; a request may name any model, as each server runs one of each kind.
TTS_MODEL_ID = "orpheus"
STT_MODEL_ID = STT_DEFAULT_MODEL  # what OpenAI's clients ask for


def _load(config: ServerConfig) -> Synthesizer:
    tts_config = TTSConfig(max_input_chars=config.max_input_chars, voice_aliases=config.voice_aliases,
                           normalize=config.normalize, admit_on_rates=config.admit_on_rates,
                           pacing=PacingPolicy(**({} if config.max_first_frames is None else {"first_most": config.max_first_frames})),
                           flush_after_s=config.ws_flush_after_s,
                           voices_dir=Path(config.voices_dir).expanduser() if config.voices_dir else None,
                           allow_reference_voices=config.allow_reference_voices)
    if config.engine == "naive":
        # Needs transformers: imported only when asked for.
        from lyre.baseline import NaiveTTS

        return NaiveTTS.load(config.model, config.codec, config.serving.device, tts_config,
                             playback_rate=config.serving.playback_rate)
    return TTS.load(config.model, config.codec, config.serving, tts_config)


def _load_stt(config: ServerConfig) -> Transcriber:
    return Transcriber.load(config.stt_model, STTConfig(device=config.stt_device or config.serving.device))


def _load_chat(config: ServerConfig) -> Chat:
    """The chat model on its own engine, on the same device, with its own KV-cache budget."""
    assert config.llm is not None
    serving = ChatServing(device=config.serving.device, max_batch=config.llm_max_batch,
                          max_seq_len=config.llm_max_seq_len, max_waiting=max(1, config.max_queue),
                          kv_cache_gb=config.llm_kv_cache_gb, prefix_caching=config.serving.prefix_caching,
                          max_step_tokens=config.serving.max_step_tokens)
    return Chat.load(config.llm, serving, config.llm_name)


async def _warm_up_chat(chat: Chat) -> None:
    """A two-token answer: the first prefill and decode pay their one-off costs here."""
    await chat.stream([{"role": "user", "content": "Hi"}], ChatOptions(max_tokens=2, temperature=0)).text()


def _thinker(config: ServerConfig, chat: Chat | None) -> Thinker | None:
    """The voice agent's think step: --llm-url when given, else the in-process chat model, if any."""
    if config.llm_url is not None:
        return RemoteThinker(config.llm_url, config.llm_api_key, config.llm_model)
    return LocalThinker(chat) if chat is not None else None


async def _load_adapters(tts: Synthesizer, config: ServerConfig) -> None:
    """``--adapter NAME=PATH``: each registered and loaded before the server is ready."""
    if config.adapters and tts.adapters is None:
        raise ValueError("--adapter needs adapter slots (--max-adapters above 0) and lyre's engine")
    for name, path in config.adapters:
        try:
            await tts.adapters.add(name, path)  # type: ignore[union-attr]
        except ValueError as exc:
            raise ValueError(f"--adapter {name}={path}: {exc}") from None


async def _warm_up(tts: Synthesizer) -> None:
    """One short utterance through engine and codec, so the first user does not pay for it; twice, so that the
    codec's warm cost (what admission reads, lyre.tts.listeners) is measured before the first user comes."""
    options = SpeechOptions(max_tokens=min(21, tts.max_tokens_limit), seed=0)  # a tiny KV cache allows less
    for _ in range(2):
        async for _ in tts.stream("Ready.", None, options, trim=False, streamed=False, request_id=WARM_UP):
            pass


async def _warm_up_stt(stt: Transcriber) -> None:
    """One second of silence through the model. Greedy and in a named language: on silence a beam
    search in the temperature fallback takes seconds on a CPU and warms up nothing more."""
    silence = np.zeros(SAMPLE_RATE, np.float32)
    await stt.transcribe(silence, TranscribeOptions(language="en", beam_size=1), session="warm-up")


async def _start_sip(state: ServerState, sessions: RealtimeSessions) -> Any:
    """The SIP endpoint (a SipServer), with ``--sip``, on a server that can hold a conversation."""
    if state.config.sip is None:
        return None
    from lyre.server.calls.sip_server import SipServer  # aiosipua, only where SIP is served

    if not state.converses:
        raise RuntimeError("--sip needs the voice agent: speech to text (--stt), text to speech and a think step "
                           "(--llm or --llm-url)")
    sip = SipServer(state, sessions)
    await sip.start(*sip_address(state.config.sip))
    return sip


def create_app(config: ServerConfig, tts: Synthesizer | None = None) -> FastAPI:
    """The app for ``config``. Pass ``tts`` to serve an already-loaded pipeline (``config.tts`` on)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        start = time.perf_counter()
        async with AsyncExitStack() as models:  # on the way out: chat, then STT, then TTS closed
            loaded = None
            if config.tts:
                loaded = tts or await asyncio.to_thread(_load, config)
                if tts is None:
                    models.callback(loaded.close)
            stt = None
            if config.stt:
                stt = await asyncio.to_thread(_load_stt, config)
                models.push_async_callback(asyncio.to_thread, stt.close)
            aligner = Aligner(config.aligner, stt, config.stt_device or config.serving.device)
            models.push_async_callback(aligner.aclose)
            chat = None
            if config.llm is not None:
                chat = await asyncio.to_thread(_load_chat, config)
                models.push_async_callback(asyncio.to_thread, chat.close)
            thinker = _thinker(config, chat)
            if isinstance(thinker, RemoteThinker):
                models.push_async_callback(thinker.aclose)
            end_of_turn = None
            if thinker is not None and stt is not None and loaded is not None and config.smart_turn:
                if (found := find_smart_turn()) is None:
                    log.warning("Smart Turn model not found (pipecat-ai is not installed): turns end on silence")
                else:
                    end_of_turn = await asyncio.to_thread(SmartTurn, found)
            state = ServerState(
                config=config,
                tts=loaded,
                stt=stt,
                chat=chat,
                thinker=thinker,
                end_of_turn=end_of_turn,
                aligner=aligner,
                admission=Admission(config.serving.max_streams, config.max_queue, config.queue_timeout_s,
                                    config.max_per_client),
                metrics=Metrics(loaded.engine_stats if loaded else None, loaded.codec_stats if loaded else None,
                                stt.stats if stt else None, chat.stats if chat else None,
                                loaded.adapters.stats if loaded is not None and loaded.adapters else None),
            )
            state.metrics.watch_sessions(lambda: RealtimeSessions.of(app).open)
            state.metrics.watch_aligner(aligner.stats)
            if loaded is not None:
                state.metrics.watch_cuts(loaded.segments_cut)
                state.metrics.watch_text(loaded.front)
            app.state.lyre = state
            if loaded is not None:
                await _load_adapters(loaded, config)
                await _warm_up(loaded)
            if stt is not None:
                await _warm_up_stt(stt)
            if chat is not None:
                await _warm_up_chat(chat)
            # One screen, once: what runs and what it costs, where the operator looks as it starts
            # (printed before /ready says so, so whoever waits for /ready finds it written).
            header = f"lyre: ready in {time.perf_counter() - start:.1f} s"
            print(summary_text(build_summary(state), header), file=sys.stderr, flush=True)
            state.fleet_voices = await share_voices(state)  # the fleet's reference voices known before /ready
            state.ready = True
            app.state.fleet_member = member = await join_fleet(state)
            sip = await _start_sip(state, RealtimeSessions.of(app))
            app.state.sip = sip
            try:
                yield
            finally:
                # Stop admitting and give in-flight streams a grace period; then the exit stack
                # stops the models (which ends any stream or transcription still running).
                state.draining = True
                state.ready = False
                deadline = time.monotonic() + _DRAIN_GRACE_S
                while (state.admission.active or state.chat_active) and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await webrtc.Calls.of(app).close_all("the server is shutting down")
                if sip is not None:
                    await sip.stop()
                if member is not None:
                    await member.drain()  # when the signal did not come through lyre's own runner
                    await member.leave()
                if state.fleet_voices is not None:
                    await state.fleet_voices.close()

    app = FastAPI(title="lyre", version="0.1.0", lifespan=lifespan)
    install_error_handlers(app)
    document_errors(app)
    app.add_middleware(RequireKey, api_key=config.api_key, open_paths=_OPEN_PATHS | twilio_stream.open_paths(config),
                       admin=_admin_request, refuse=_refuse)
    app.include_router(adapters_api.router)
    app.include_router(audio_speech.router)
    app.include_router(voices_api.router)
    app.include_router(tts_socket.router)
    app.include_router(transcriptions.router)
    app.include_router(alignments.router)
    app.include_router(realtime_socket.router)
    app.include_router(webrtc.router)
    app.include_router(twilio_stream.router)
    app.include_router(completions.router)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        """Alive (the process answers); ``summary``: what it serves and how (the start-up summary's facts),
        null until the models are loaded; ``kv_cache``: each engine's blocks now (``tts``, ``chat``); and to the
        admin key, ``settings``: each setting's value (secrets masked) and where it came from."""
        state: ServerState | None = getattr(request.app.state, "lyre", None)
        if state is None:
            return {"status": "ok", "summary": None, "kv_cache": None}
        engines = {"tts": state.tts.engine_stats() if state.tts is not None else None,
                   "chat": state.chat.stats() if state.chat is not None else None}
        health = {"status": "ok", "summary": summary_json(build_summary(state)),
                  "kv_cache": {name: kv_cache_json(stats) for name, stats in engines.items() if stats is not None}}
        if config.settings_json is not None and is_admin(request, config.admin_key):
            health["settings"] = json.loads(config.settings_json)
        return health

    @app.get("/ready", responses={503: {"description": "Loading, warming up, shutting down, or an engine failed"}})
    async def ready(request: Request) -> JSONResponse:
        """Model loaded and warmed up; 503 until then, while shutting down, and once an engine has failed."""
        state: ServerState | None = getattr(request.app.state, "lyre", None)
        ok = (state is not None and state.ready and (state.tts is None or state.tts.engine_stats().failure is None)
              and (state.chat is None or state.chat.stats().failure is None))
        return JSONResponse({"ready": ok}, status_code=200 if ok else 503)

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, object]:
        """The models served: orpheus (text to speech), whisper-1 (speech to text), the chat model by its name."""
        state: ServerState = request.app.state.lyre
        served = [name for name, on in ((TTS_MODEL_ID, state.tts), (STT_MODEL_ID, state.stt)) if on is not None]
        served += [state.chat.name] if state.chat is not None else []
        return {"object": "list",
                "data": [{"id": name, "object": "model", "created": 0, "owned_by": "lyre"} for name in served]}

    @app.get("/metrics", response_class=Response,
             responses={200: {"description": "Prometheus text format", "content": {CONTENT_TYPE_LATEST: {}}}})
    async def metrics(request: Request) -> Response:
        state: ServerState = request.app.state.lyre
        state.metrics.queued.set(state.admission.queued)
        state.metrics.active.set(state.admission.active)
        return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def playground() -> HTMLResponse:
        return HTMLResponse(files("lyre.server").joinpath("playground.html").read_text())

    return app


def _admin_request(method: str, path: str) -> bool:
    return path.startswith(adapters_api.ADMIN_PREFIX) or voices_api.is_admin(method, path)


def _refuse() -> Response:
    return error_response(401, "missing or wrong API key (send Authorization: Bearer KEY)", "authentication_error",
                          headers={"WWW-Authenticate": "Bearer"})
