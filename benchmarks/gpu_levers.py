"""The engine's and the codec's levers, each measured on and off: the first half of the GPU run.

- decode step time at each batch and context, for every lever set
  (attention: sdpa, which gathers each row's KV blocks (under graphs, up to
  the step's context bucket), / flex, which reads
  them in place; CUDA graphs off / on; bf16 / fp8);
- (in ``gpu_agreement``) whether each lever set draws the tokens the
  reference draws: sdpa's plain eager decoding in bf16;
- FP8's logits against bf16 (KL divergence, top-1 agreement);
- SNAC per batch of windows, fp32 / bf16, eager / CUDA graphs, and bf16's SNR;
- the decode step with 0 to 8 distinct LoRA adapters (rank 16, all seven
  projections) in one batch, grouped (eager) and stacked (fixed shape, graphs).

Used by benchmarks/gpu.py; every function returns plain figures for its JSON.
On a CPU (``--small``) the same code runs with "graphs" meaning the
fixed-shape path run eagerly (its padding and slicing, not the capture).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from lyre import orpheus
from lyre.codec import CodecWindow, SnacDecoder
from lyre.engine import EngineConfig, SamplingParams
from lyre.engine.attention import FreshPrefill
from lyre.engine.by_hand import ByHand
from lyre.models.fp8 import quantize_fp8
from lyre.engine.kv_cache import KVCache
from lyre.models.llama import Llama
from lyre.models.lora import LoraBank, attach_lora
from lyre.models.peft_folder import LORA_TARGETS, AdapterWeights
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

__all__ = ["MODES", "PROMPTS", "Lever", "codec_grid", "fp8_quality", "free_memory", "lora_grid", "model_for",
           "quantize_copy", "runner_for", "step_grid"]

# "tara: Hello there, how are you?" in Orpheus's prompt layout, and two more.
PROMPTS = [
    [128259, 128000, 83, 5169, 25, 22691, 1070, 11, 1268, 527, 499, 30, 128009, 128260, 128261, 128257],
    [128259, 128000, 273, 64, 25, 3923, 264, 6555, 1938, 369, 264, 4321, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 40, 1093, 13, 128009, 128260, 128261, 128257],
]


MODES = ("eager", "fixed", "graphs")  # grouped eager decoding; the fixed-shape path eagerly; it from CUDA graphs


@dataclass(frozen=True)
class Lever:
    attention: str  # sdpa or flex
    mode: str  # one of MODES; "graphs" off CUDA runs the fixed-shape path eagerly
    fp8: bool

    @property
    def name(self) -> str:
        return "+".join([self.attention, self.mode, "fp8" if self.fp8 else "bf16"])


def runner_for(model: Llama, lever: Lever, max_batch: int, max_seq_len: int, device: str) -> ModelRunner:
    config = EngineConfig(max_batch=max_batch, max_seq_len=max_seq_len, device=device, attention=lever.attention,
                          cuda_graphs=lever.mode == "graphs" and device.startswith("cuda"))
    return ModelRunner(model, config, AUDIO_CONSTRAINT.family, fixed_shape=lever.mode != "eager")


def _placed(runner: ModelRunner, batch: int, context: int) -> list[Request]:
    """``batch`` running requests whose next token sits at position ``context - 1``, with blocks for every
    position (no prefill needed). Each call hands out ``runner``'s whole pool afresh: the rows of the call
    before are done with their blocks."""
    hand = ByHand(runner)
    reqs = []
    for slot in range(batch):
        req = Request(f"r{slot}", [PROMPTS[0][0]] * (context - 1), SamplingParams(), seed=slot,
                      constraint=AUDIO_CONSTRAINT)
        req.output_ids = [orpheus.AUDIO_TOKEN_BASE]
        hand.place(req, slot)
        reqs.append(req)
    return reqs


def model_for(base: Llama, fp8: bool, cache: dict[bool, Llama]) -> Llama:
    if fp8 not in cache:
        cache[fp8] = base if not fp8 else quantize_copy(base)
    return cache[fp8]


def quantize_copy(model: Llama) -> Llama:
    quantized = copy.deepcopy(model)
    quantize_fp8(quantized)
    return quantized


def step_grid(base: Llama, levers: list[Lever], batches: list[int], contexts: list[int], device: str,
              steps: int, log: Callable[[str], None]) -> list[dict]:
    """Milliseconds per decode step (launch to tokens on the host) for each lever, batch and context."""
    rows, models = [], {}  # type: ignore[var-annotated]
    max_seq_len = -(-max(contexts) // 128) * 128
    for lever in levers:
        row: dict = {"lever": lever.name, "ms": {}}
        try:
            started = time.perf_counter()
            runner = runner_for(model_for(base, lever.fp8, models), lever, max(batches), max_seq_len, device)
            row["setup_s"] = time.perf_counter() - started
            for batch in batches:
                for context in contexts:
                    reqs = _placed(runner, batch, context)
                    for _ in range(2):  # warm-up: compiles, autotunes
                        runner.step([], reqs)
                    start = time.perf_counter()
                    for _ in range(steps):
                        runner.step([], reqs)  # nothing appended: every step reads the same context
                    row["ms"][f"{batch}x{context}"] = 1000 * (time.perf_counter() - start) / steps
            log(f"  {lever.name:<22} " + " ".join(f"{k}:{v:.2f}" for k, v in row["ms"].items()))
        except Exception as exc:  # one broken lever must not cost the rest of the run
            row["error"] = f"{type(exc).__name__}: {exc}"
            log(f"  {lever.name:<22} failed: {row['error']}")
        finally:
            runner = None  # free its KV cache and graphs before the next lever's
            free_memory(device)
        rows.append(row)
    return rows


def _random_adapter(model: Llama, name: str, rank: int, seed: int) -> AdapterWeights:
    """An adapter of ``model``'s shape with random A and B (the GPU machine has no peft, and no weights to train)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {}
    for index, layer in enumerate(model.model.layers):
        for projection, place in LORA_TARGETS.items():
            linear = getattr(getattr(layer, place), projection)
            linear = getattr(linear, "base", linear)
            weights[(index, projection)] = (torch.randn(rank, linear.in_features, generator=generator) * 0.01,
                                            torch.randn(linear.out_features, rank, generator=generator) * 0.01)
    return AdapterWeights(name=name, path=None, rank=rank, scale=2.0, weights=weights)  # type: ignore[arg-type]


def lora_grid(base: Llama, batches: list[int], distinct: list[int], context: int, device: str, steps: int,
              log: Callable[[str], None], rank: int = 16) -> dict:
    """Decode-step milliseconds with the rows spread over N distinct adapters, for each batch, and the
    ratio to no adapter; eager (rows grouped by adapter) and graphs (the stacked bank; fixed-shape off CUDA).
    Attaches a bank to ``base`` in place: run it last among the sections that use the model."""
    slots = max(distinct)
    bank = LoraBank(slots, rank, base.output_weight.dtype, base.output_weight.device)
    attach_lora(base, bank)
    for slot in range(slots):
        bank.install(slot, _random_adapter(base, f"v{slot}", rank, slot))
    out: dict = {"rank": rank, "slots": slots, "context": context, "ms": {}, "ratio": {}}
    max_seq_len = -(-(context + 1) // 128) * 128
    for mode in ("eager", "graphs"):
        lever = Lever("sdpa", mode, False)
        try:
            config = EngineConfig(max_batch=max(batches), max_seq_len=max_seq_len, device=device, attention="sdpa",
                                  cuda_graphs=mode == "graphs" and device.startswith("cuda"))
            runner = ModelRunner(base, config, AUDIO_CONSTRAINT.family, fixed_shape=mode != "eager", bank=bank)
            for batch in batches:
                for n in distinct:
                    reqs = _placed(runner, batch, context)
                    for i, req in enumerate(reqs):
                        req.adapter_slot = i % n if n else None
                    for _ in range(2):
                        runner.step([], reqs)
                    start = time.perf_counter()
                    for _ in range(steps):
                        runner.step([], reqs)
                    key = f"{lever.name} {batch}x{n}"
                    out["ms"][key] = 1000 * (time.perf_counter() - start) / steps
                    out["ratio"][key] = out["ms"][key] / out["ms"][f"{lever.name} {batch}x{distinct[0]}"]
                log(f"  lora {lever.name:<18} batch {batch}: " + " ".join(
                    f"{n}:{out['ms'][f'{lever.name} {batch}x{n}']:.2f}ms" for n in distinct))
        except Exception as exc:
            out[f"error {mode}"] = f"{type(exc).__name__}: {exc}"
            log(f"  lora {lever.name} failed: {out[f'error {mode}']}")
        finally:
            runner = None
            free_memory(device)
    return out


@torch.inference_mode()
def fp8_quality(base: Llama, device: str) -> dict:
    """KL(bf16 || fp8) and top-1 agreement of next-audio-token distributions over the prompts' positions."""
    quantized = quantize_copy(base)
    kls, agree, total = [], 0, 0
    for prompt in PROMPTS:
        logits = []
        for model in (base, quantized):
            cache = KVCache(model.config, 1, 128, model.output_weight.dtype, torch.device(device))  # one block
            positions = torch.arange(len(prompt), device=device)[None]
            hidden = model(torch.tensor([prompt], device=device), positions, FreshPrefill(cache, positions[0]))
            logits.append(model.logits(hidden[0], orpheus.AUDIO_TOKEN_BASE, orpheus.AUDIO_TOKEN_BASE + 4096))
        want, got = (x.float().log_softmax(-1) for x in logits)
        kls.append((want.exp() * (want - got)).sum(-1))
        agree += int((want.argmax(-1) == got.argmax(-1)).sum())
        total += len(prompt)
    kl = torch.cat(kls)
    return {"kl_mean": float(kl.mean()), "kl_max": float(kl.max()), "top1_agreement": agree / total,
            "positions": total}


def codec_grid(make: Callable[[str, bool], SnacDecoder], batches: list[int], frame_counts: list[int],
               variants: list[tuple[str, bool]], repeats: int, log: Callable[[str], None]) -> dict:
    """ms per batch of windows (what lyre decoded before its streaming decoder, and other servers decode) for
    each (dtype, graphs) variant; bf16's SNR against fp32."""
    rng = np.random.default_rng(0)
    result: dict = {"ms": {}, "errors": {}}
    outputs: dict[str, np.ndarray] = {}
    for dtype, graphs in variants:
        name = f"{dtype}+{'graphs' if graphs else 'eager'}"
        try:
            decoder = make(dtype, graphs)
            for n in frame_counts:
                for batch in batches:
                    windows = [CodecWindow(frames=tuple(tuple(int(c) for c in rng.integers(0, 4096, 7))
                                                        for _ in range(n)), start_frame=0, keep=(1, n - 2 if n > 3 else n),
                                           seed=b) for b in range(batch)]
                    for _ in range(2 if repeats > 1 else 0):  # warm-up (none for a small run's single timing)
                        decoder.decode_windows(windows)
                    start = time.perf_counter()
                    for _ in range(repeats):
                        decoded = decoder.decode_windows(windows)
                    result["ms"][f"{name} {n}f x{batch}"] = 1000 * (time.perf_counter() - start) / repeats
                    if batch == batches[-1] and n == frame_counts[-1]:
                        outputs[name] = np.concatenate(decoded)
            log(f"  codec {name:<16} " + " ".join(f"{k.split(' ', 1)[1]}:{v:.1f}" for k, v in result["ms"].items()
                                                  if k.startswith(name)))
        except Exception as exc:
            result["errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"  codec {name} failed: {result['errors'][name]}")
    reference = outputs.get("float32+eager")
    for name, audio in outputs.items():
        if reference is not None and name != "float32+eager" and len(audio) == len(reference):
            noise = float(np.sum((reference - audio) ** 2)) or 1e-30
            result.setdefault("snr_db_vs_fp32", {})[name] = 10 * np.log10(float(np.sum(reference**2)) / noise)
    return result


def stream_grid(make: Callable[[str, bool], SnacDecoder], batches: list[int], variants: list[tuple[str, bool]],
                repeats: int, log: Callable[[str], None]) -> dict:
    """The streaming decoder (lyre.codec.streaming), as lyre serves with it: ms per call and per frame for each
    (dtype, CUDA graphs) variant at each batch of streams, 1 and 4 frames a call, each stream past its start;
    and each variant's SNR against the whole decode of the same 24 frames (float rounding, if it is exact)."""
    from lyre.codec.streaming import StreamingSnac
    from lyre.orpheus import codes_to_snac_levels

    rng = np.random.default_rng(1)
    result: dict = {"ms": {}, "ms_per_frame": {}, "errors": {}, "snr_db_vs_whole": {}}
    frames = [tuple(int(c) for c in rng.integers(0, 4096, 7)) for _ in range(24)]
    for dtype, graphs in variants:
        name = f"{dtype}+{'graphs' if graphs else 'eager'}"
        try:
            decoder = make(dtype, False)
            stream = StreamingSnac(decoder.model, slots=max(batches), fixed_shape=graphs)
            if graphs:
                stream.capture_graphs(4)
            for per_call in (1, 4):
                for batch in batches:
                    slots = [stream.open(seed=b) for b in range(batch)]
                    feeds = [(slot, frames[:per_call]) for slot in slots]
                    for _ in range(3 if repeats > 1 else 1):  # past the start, where the masks work
                        stream.push(feeds)
                    start = time.perf_counter()
                    for _ in range(repeats):
                        stream.push(feeds)
                    ms = 1000 * (time.perf_counter() - start) / repeats
                    result["ms"][f"{name} {per_call}f x{batch}"] = ms
                    result["ms_per_frame"][f"{name} {per_call}f x{batch}"] = ms / (per_call * batch)
                    for slot in slots:
                        stream.close(slot)
            slot = stream.open(seed=3)
            audio = np.concatenate([stream.push([(slot, [f])])[0] for f in frames] + stream.finish([slot]))
            whole = decoder.decode(codes_to_snac_levels(frames), seed=3)
            noise = float(np.sum((whole - audio) ** 2)) or 1e-30
            result["snr_db_vs_whole"][name] = 10 * np.log10(float(np.sum(whole ** 2)) / noise)
            log(f"  stream {name:<16} " + " ".join(f"{k.split(' ', 1)[1]}:{v:.2f}" for k, v in
                                                   result["ms_per_frame"].items() if k.startswith(name))
                + f" ms/frame; {result['snr_db_vs_whole'][name]:.0f} dB from the whole decode")
        except Exception as exc:
            result["errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"  stream {name} failed: {result['errors'][name]}")
    return result


def free_memory(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
