"""The server's settings, validated once."""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass, field

from lyre.common.device import resolve_device
from lyre.tts import ServingConfig

__all__ = ["ENGINES", "ServerConfig", "ice_server_parts"]

# "naive" is the baseline pipeline (transformers generate per request, the reference decode), for comparisons.
ENGINES = ("lyre", "naive")


@dataclass(frozen=True)
class ServerConfig:
    """What ``lyre serve`` runs with. Capacity limits keep memory bounded under overload."""

    host: str = "127.0.0.1"
    port: int = 8000
    model: str | None = None  # folder or hub id; None (or "demo"): the built-in demo model
    codec: str | None = None  # folder or hub id; None: the codec the model needs ("demo": the demo's random one)
    # How the pipeline runs: device (auto by default), streams, KV cache, levers, cloned-voice slots. Its
    # ``device`` is the one speech to text and chat use too unless they name their own.
    serving: ServingConfig = field(default_factory=lambda: ServingConfig(device="auto", max_adapters=8))
    max_queue: int = 16  # requests waiting for a stream beyond max_streams; more get 429
    queue_timeout_s: float = 30.0  # a queued request gives up after this
    # Speech streams (running or queued) and realtime sessions one client address may hold at once, each;
    # None: no share (lyre.server.client_shares says why that is the default).
    max_per_client: int | None = None
    max_body_bytes: int = 1024 * 1024  # a JSON request body (transcription uploads have their own limit)
    adapters: tuple[tuple[str, str], ...] = ()  # (name, folder) loaded at start (--adapter NAME=PATH)
    admin_key: str | None = None  # the adapter admin routes answer only to this key; None: they are off
    adapter_root: str | None = None  # POST /v1/adapters reads folders only inside this one; None: any folder
    max_input_chars: int = 4096
    api_key: str | None = None
    # (alias, voice) pairs over the default OpenAI-name aliases and voices.json's (--voice-alias NAME=VOICE).
    voice_aliases: tuple[tuple[str, str], ...] = ()
    voices_dir: str | None = None  # reference voices' folder; None: the lyre cache's, one per codec
    allow_reference_voices: bool = False  # speak reference voices whatever the model says of itself
    normalize: bool = True  # read numbers, amounts, dates... as words before speaking (--no-normalize: off)
    admit_on_rates: bool = True  # refuse a stream the listeners' gaps or the measured rates cannot serve
    max_first_frames: int | None = None  # the first chunk's frames at most (None: as the measured rates ask, up to 8)
    max_inline_references: int = 2  # requests' own reference clips made into voices at once; more get 429
    ws_max_contexts: int = 16  # open contexts per WebSocket
    ws_max_message_bytes: int = 64 * 1024
    ws_idle_timeout_s: float = 60.0  # a context with no new text and nothing to speak is closed
    write_timeout_s: float = 10.0  # a streamed HTTP answer or WebSocket whose listener takes nothing this long is cut
    ws_flush_after_s: float = 0.8  # pending text with no sentence end is spoken after this pause
    engine: str = "lyre"  # one of ENGINES
    tts: bool = True  # serve text to speech (the Orpheus pipeline)
    stt: bool = False  # serve speech to text (Whisper)
    stt_model: str | None = None  # Whisper folder or hub id; None: the demo, Whisper base
    stt_device: str | None = None  # None: the same as device; auto is resolved as device is
    stt_max_file_bytes: int = 25 * 1024 * 1024  # OpenAI's upload limit
    # Audio a file to transcribe may hold: decoding stops past it (a small compressed file can hold hours).
    stt_max_file_seconds: float = 600.0
    stt_max_sessions: int = 8  # realtime sessions open at once: sockets, WebRTC calls and phone streams together
    stt_idle_timeout_s: float = 30.0  # a realtime session with no client event and no pass running this long closes
    # A conversation on /v1/realtime lasts at most this long (OpenAI's limit: 60 minutes), however busy or quiet.
    realtime_max_session_s: float = 3600.0
    # WebSocket pings: a client that has not answered one for ws_ping_s after it was sent is gone, and its
    # sockets (and sessions) are freed. None: no pings.
    ws_ping_s: float | None = 10.0
    stt_max_buffer_s: float = 60.0  # seconds of audio a realtime session's input buffer may hold
    # What times words (word timestamps, /v1/audio/alignments, the agent's cut): None or "auto": English by
    # phones, other languages by Whisper; "phones", "whisper", "off", or a Whisper folder or hub id
    # (lyre.server.aligner).
    aligner: str | None = None
    llm: str | None = None  # chat model: a .gguf file, a Hugging Face folder or hub id, or "demo"; None: no chat
    llm_name: str | None = None  # what /v1/models calls it; None: the file's stem or the folder's name
    llm_max_batch: int = 8  # chat requests generating at once (the chat engine's KV-cache slots)
    llm_max_seq_len: int = 2048  # KV-cache positions per chat request: prompt and answer together
    llm_kv_cache_gb: float | None = None  # the chat engine's KV cache (None: llm_max_batch of llm_max_seq_len)
    register: str | None = None  # redis://... : join this fleet (lyre.fleet.member); None: stand alone
    advertise: str | None = None  # the URL routers reach this server at; needed with register
    fleet_ttl_s: float = 3.0  # the fleet record expires this long after the last heartbeat
    llm_url: str | None = None  # the voice agent thinks with this OpenAI-compatible endpoint instead of llm
    llm_api_key: str | None = None
    llm_model: str | None = None  # the model name to ask llm_url for
    smart_turn: bool = True  # the agent's semantic end-of-turn model, where pipecat-ai ships it
    # STUN/TURN servers for WebRTC calls (--ice-server): "stun:HOST:PORT" or "turn:USER:PASSWORD@HOST:PORT"
    ice_servers: tuple[str, ...] = ()
    # Twilio's auth token: phone calls (/v1/twilio/*) must carry its request signature; None: not checked
    twilio_auth_token: str | None = None
    sip: str | None = None  # HOST:PORT: answer SIP calls over UDP and TCP there (calls/sip_server.py); None: no SIP
    sip_allow: tuple[str, ...] = ("127.0.0.0/8", "::1/128")  # networks SIP messages are taken from; others dropped
    # USER:PASSWORD: SIP calls from outside sip_allow are taken when they authenticate with it (digest); None: never
    sip_auth: str | None = None
    sip_advertise: str | None = None  # the IP address SIP and SDP give out (a public one behind NAT); None: found
    sip_ring_s: float = 0.0  # how long a SIP call rings (180) before lyre answers it
    # (number, JSON): the session.update session a SIP call to that number (the request URI's user) opens with;
    # number "": every other call's
    sip_sessions: tuple[tuple[str, str], ...] = ()
    sip_transfers: tuple[tuple[str, str], ...] = ()  # (name, sip:/tel: URI): where transfer_call may send a call
    # The settings the server was started with and where each came from (secrets masked), as JSON: /health
    # shows them to the admin key
    settings_json: str | None = None

    def __post_init__(self) -> None:
        # Devices are resolved once (the pipeline's by ServingConfig): every check below and every model
        # loaded sees a concrete one.
        if self.stt_device is not None:
            try:
                object.__setattr__(self, "stt_device", resolve_device(self.stt_device))
            except ValueError as exc:
                raise ValueError(f"stt_device: {exc}") from None
        if not (self.tts or self.stt or self.llm):
            raise ValueError("serve at least one of text to speech (tts), speech to text (stt) and chat (llm)")
        for name in ("max_input_chars", "ws_max_contexts", "ws_max_message_bytes",
                     "stt_max_file_bytes", "stt_max_sessions", "max_body_bytes", "llm_max_batch", "llm_max_seq_len",
                     "max_inline_references"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {self.max_queue}")
        if self.max_per_client is not None and self.max_per_client < 1:
            raise ValueError(f"max_per_client must be >= 1, got {self.max_per_client}")
        if self.ws_ping_s is not None and not self.ws_ping_s > 0:
            raise ValueError(f"ws_ping_s must be > 0 (or None: no pings), got {self.ws_ping_s}")
        for name in ("queue_timeout_s", "ws_idle_timeout_s", "ws_flush_after_s", "stt_idle_timeout_s", "write_timeout_s",
                     "realtime_max_session_s",
                     "stt_max_buffer_s", "stt_max_file_seconds"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.port < 65536:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        device = self.serving.device
        for name in ("cuda_graphs", "codec_graphs"):
            if getattr(self.serving, name) and not device.startswith("cuda"):
                raise ValueError(f"{name.replace('_', '-')} needs a CUDA device (--device cuda), got {device!r}")
        if self.admin_key is not None and not self.admin_key:
            raise ValueError("admin_key must not be empty")
        if self.admin_key is not None and self.admin_key == self.api_key:
            raise ValueError("the admin key must differ from the API key")
        if self.adapter_root is not None and not os.path.isdir(os.path.expanduser(self.adapter_root)):
            raise ValueError(f"adapter_root: {self.adapter_root!r} is not a folder")
        if self.llm_url is not None and not self.llm_url.startswith(("http://", "https://")):
            raise ValueError(f"llm_url must be an http:// or https:// URL, got {self.llm_url!r}")
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty")
        if self.twilio_auth_token is not None and not self.twilio_auth_token:
            raise ValueError("twilio_auth_token must not be empty")
        self._check_fleet()
        self._check_sip()
        for url in self.ice_servers:
            ice_server_parts(url)

    def _check_sip(self) -> None:
        if self.sip is not None:
            sip_address(self.sip)
            if not (self.stt and self.tts and (self.llm or self.llm_url)):
                raise ValueError("--sip needs the voice agent: speech to text (--stt), text to speech and a think "
                                 "step (--llm or --llm-url)")
        for cidr in self.sip_allow:
            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError:
                raise ValueError(f"--sip-allow {cidr!r} is not a network (e.g. 10.0.0.0/8 or 192.0.2.7)") from None
        if self.sip_auth is not None and (":" not in self.sip_auth or not all(self.sip_auth.partition(":")[::2])):
            raise ValueError("--sip-auth must be USER:PASSWORD")
        for number, session in self.sip_sessions:
            try:
                ok = isinstance(json.loads(session), dict)
            except json.JSONDecodeError:
                ok = False
            if not ok:
                raise ValueError(f"--sip-session {number + '=' if number else ''}...: {session[:80]!r} is not a JSON "
                                 f"object (the session of a session.update)")
        if self.sip_advertise is not None:
            try:
                ipaddress.ip_address(self.sip_advertise)
            except ValueError:
                raise ValueError(f"--sip-advertise must be an IP address, got {self.sip_advertise!r}") from None
        if not 0 <= self.sip_ring_s <= 60:
            raise ValueError(f"sip_ring_s must be in 0..60 seconds, got {self.sip_ring_s}")

    def _check_fleet(self) -> None:
        if self.register is None:
            if self.advertise is not None:
                raise ValueError("--advertise needs --register redis://HOST:PORT")
            return
        if not self.register.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"--register must be a redis://, rediss:// or unix:// URL, got {self.register!r}")
        if not self.advertise or not self.advertise.startswith(("http://", "https://")):
            raise ValueError(f"--register needs --advertise http://HOST:PORT (where routers reach this server), "
                             f"got {self.advertise!r}")
        if not self.fleet_ttl_s > 0:
            raise ValueError(f"fleet_ttl_s must be > 0, got {self.fleet_ttl_s}")


def ice_server_parts(url: str) -> tuple[str, str | None, str | None]:
    """An ``--ice-server``: (url, username, credential). A TURN server's credentials ride in the URL as
    ``turn:USER:PASSWORD@HOST:PORT`` and come out of it; a STUN server has none."""
    scheme, _, rest = url.partition(":")
    if scheme not in ("stun", "stuns", "turn", "turns") or not rest:
        raise ValueError(f"--ice-server must be stun:HOST[:PORT] or turn:USER:PASSWORD@HOST[:PORT], got {url!r}")
    if "@" not in rest:
        if scheme.startswith("turn"):
            raise ValueError(f"--ice-server {url!r}: a TURN server needs its credentials, "
                             f"{scheme}:USER:PASSWORD@HOST[:PORT]")
        return url, None, None
    credentials, _, host = rest.rpartition("@")
    username, colon, credential = credentials.partition(":")
    if not (username and colon and credential and host):
        raise ValueError(f"--ice-server {url!r}: credentials must be USER:PASSWORD@ before the host")
    if scheme.startswith("stun"):
        raise ValueError(f"--ice-server {url!r}: a STUN server takes no credentials")
    return f"{scheme}:{host}", username, credential


def sip_address(address: str) -> tuple[str, int]:
    """``--sip HOST:PORT`` (an IPv6 host in brackets) as (host, port); ValueError saying what is wrong."""
    host, colon, port = address.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--sip must be HOST:PORT (e.g. 0.0.0.0:5060), got {address!r}")
    return host, int(port)


def sip_session(option: str) -> tuple[str, str]:
    """``--sip-session [NUMBER=]JSON`` as (number, JSON); number "" for the default."""
    if option.lstrip().startswith("{"):
        return "", option
    number, equals, session = option.partition("=")
    if not equals or not number:
        raise ValueError(f"--sip-session must be JSON or NUMBER=JSON, got {option[:80]!r}")
    return number, session


def transfer_target(option: str) -> tuple[str, str]:
    """``--sip-transfer NAME=URI`` as (name, URI); ValueError saying what is wrong."""
    name, equals, uri = option.partition("=")
    if not (equals and name and uri.startswith(("sip:", "sips:", "tel:"))) or any(c in uri for c in "<>\r\n\" "):
        raise ValueError(f"--sip-transfer must be NAME=URI with a sip:, sips: or tel: URI, got {option[:80]!r}")
    return name, uri
