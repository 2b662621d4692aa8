"""Voice training on the demo model on this machine: speed at the defaults, and the leading-silence recipe in miniature.

1. Speed: training steps per second and peak memory with train-voice's
   defaults (rank 16, alpha 32, dropout 0.05, seven projections, batch 4,
   fp32 on CPU) over espeak-ng clips.
2. The silence experiment: overfit a LoRA on a handful of clips, each opened
   with 600 ms of digital silence (as Orpheus's base model opens), twice: once
   with that silence kept, once cut (train-voice's default). Then generate
   each clip's prompt through lyre's engine with each adapter and count the
   leading frames whose 7 codes are codes SNAC gives for silence (zeros
   encoded with the same codec): how long each voice waits before speaking.

    .venv/bin/python benchmarks/train_voice.py
    .venv/bin/python benchmarks/train_voice.py --only silence --seeds 4 --json train_voice.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' speech and dataset writer

from lyre import orpheus  # noqa: E402
from lyre.codec.encoder import SnacEncoder  # noqa: E402
from lyre.codec.snac import load_snac  # noqa: E402
from lyre.models.demo import demo_model  # noqa: E402
from lyre.engine import Engine, EngineConfig, SamplingParams  # noqa: E402
from lyre.models.loader import load_llama  # noqa: E402
from lyre.train import (DataConfig, SilenceCut, TrainConfig, VoiceJob, leading_silent_frames,  # noqa: E402
                        prepare_voice_data, silence_frames, train_voice)
from lyre.tts import AUDIO_CONSTRAINT  # noqa: E402
from speech import SENTENCES  # noqa: E402
from voice_data import spoken_dataset  # noqa: E402


# The shortest of the tests' sentences: overfitting costs less on short clips.
_SHORT = (6, 4, 12, 2, 3, 7, 11, 13)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def speed(root: Path, steps: int, clips: int) -> dict:
    """Steps per second and memory at train-voice's defaults (only --steps set)."""
    data = spoken_dataset(root / "speed-data", list(SENTENCES[:clips]))
    job = VoiceJob(data, root / "speed", DataConfig("ada"), TrainConfig(steps=steps))
    prepare_voice_data(job)  # encoded now, read from the cache by the run below
    times: list[float] = []
    last = [time.perf_counter()]

    def tick(step: int, loss: float) -> None:
        now = time.perf_counter()
        times.append(now - last[0])
        last[0] = now

    rss_before = _rss_mb()
    started = time.perf_counter()
    last[0] = started
    train_voice(job, show_progress=False, on_step=tick, log=lambda line: None)
    steady = times[1:] or times  # the first step pays for lazy initialisation
    prepared, _ = prepare_voice_data(job)
    lengths = [len(c.ids) for c in prepared.clips]
    return {"steps": steps, "clips": len(prepared.clips), "batch_size": TrainConfig().batch_size,
            "mean_sequence_tokens": round(statistics.fmean(lengths)),
            "steps_per_s": round(1 / statistics.fmean(steady), 3),
            "step_s_median": round(statistics.median(steady), 3),
            "rss_before_training_mb": round(rss_before),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}


def overfit(root: Path, data: Path, cut: bool, steps: int, lr: float) -> Path:
    out = root / ("cut" if cut else "kept")
    job = VoiceJob(data, out, DataConfig("ada", SilenceCut(cut_leading=cut)),
                   TrainConfig(steps=steps, batch_size=8, learning_rate=lr, warmup_steps=5, val_share=0.0,
                               dropout=0.0, checkpoint_every=10**6))
    result = train_voice(job, show_progress=False, log=lambda line: None)
    print(f"  {out.name}: {steps} steps, final loss {result.train_loss:.3f}, {result.seconds:.0f} s", file=sys.stderr)
    return out


async def _openings(engine: Engine, prompts: list[list[int]], adapter: str | None, silence: set,
                    sampling: SamplingParams) -> list[int]:
    counts = []
    for prompt in prompts:
        tokens = [t async for t in engine.generate(prompt, sampling, constraint=AUDIO_CONSTRAINT, adapter=adapter)]
        counts.append(leading_silent_frames([t for t in tokens if t != orpheus.STOP_TOKEN], silence))
    return counts


def silence_experiment(root: Path, clips: int, steps: int, lr: float, seeds: int) -> dict:
    demo = demo_model()
    data = spoken_dataset(root / "overfit-data", [SENTENCES[i] for i in _SHORT][:clips])
    folders = {"kept": overfit(root, data, cut=False, steps=steps, lr=lr),
               "cut": overfit(root, data, cut=True, steps=steps, lr=lr)}
    silence = silence_frames(SnacEncoder(load_snac(demo.codec)))
    prepared, _ = prepare_voice_data(VoiceJob(data, folders["kept"], DataConfig("ada", SilenceCut(cut_leading=False))))
    trained_on = {"kept": [leading_silent_frames(c.audio_tokens, silence) for c in prepared.clips]}
    prepared_cut, _ = prepare_voice_data(VoiceJob(data, folders["cut"], DataConfig("ada")))
    trained_on["cut"] = [leading_silent_frames(c.audio_tokens, silence) for c in prepared_cut.clips]
    prompts = [c.ids[:c.prompt_len] for c in prepared.clips]
    model = load_llama(demo.model, 512, "cpu", "float32")
    engine = Engine(model, EngineConfig(max_batch=4, max_seq_len=512, max_adapters=2, lora_rank=16),
                    AUDIO_CONSTRAINT.family)
    frames = 16  # 1.4 s: past the 7 frames of the 600 ms opening
    results: dict = {"silence_frames_known": len(silence), "training_data_opening_frames": trained_on}
    try:
        adapters = engine.adapters
        assert adapters is not None
        for name, folder in folders.items():
            adapters.register(name, folder)

        async def run() -> None:
            for name in ("kept", "cut"):
                await adapters.load(name)
            for label, adapter in (("base", None), ("kept", "kept"), ("cut", "cut")):
                greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=7 * frames,
                                        stop_ids=(orpheus.STOP_TOKEN,))
                sampled = []
                for seed in range(seeds):  # the served defaults: temperature 0.6, top_p 0.8, penalty 1.3
                    params = SamplingParams(max_tokens=7 * frames, stop_ids=(orpheus.STOP_TOKEN,), seed=seed)
                    sampled += await _openings(engine, prompts, adapter, silence, params)
                results[label] = {"greedy": await _openings(engine, prompts, adapter, silence, greedy),
                                  "sampled_mean": round(statistics.fmean(sampled), 2),
                                  "sampled_max": max(sampled)}

        asyncio.run(run())
    finally:
        engine.shutdown()
    results |= {"clips": len(prompts), "steps": steps, "learning_rate": lr, "frames_generated": frames,
                "seeds": seeds}
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--speed-steps", type=int, default=6)
    parser.add_argument("--speed-clips", type=int, default=8)
    parser.add_argument("--overfit-clips", type=int, default=2)
    parser.add_argument("--overfit-steps", type=int, default=150)
    parser.add_argument("--overfit-lr", type=float, default=5e-3)
    parser.add_argument("--seeds", type=int, default=2, help="sampled generations per clip and voice")
    parser.add_argument("--only", choices=("speed", "silence"), help="run one part")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    report = {"machine": f"{platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.only in (None, "speed"):
            print("speed at the defaults ...", file=sys.stderr)
            report["speed"] = speed(root, args.speed_steps, args.speed_clips)
            print(json.dumps(report["speed"]), file=sys.stderr)
        if args.only in (None, "silence"):
            print("silence experiment ...", file=sys.stderr)
            report["silence"] = silence_experiment(root, args.overfit_clips, args.overfit_steps, args.overfit_lr,
                                                   args.seeds)
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
