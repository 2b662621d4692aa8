"""What cloned voices cost: the decode step with 0 to 8 distinct LoRA adapters in one batch, and loading one.

At batch ``--batch`` (32) on the demo model (or ``--model``), the rows are
spread round-robin over N distinct adapters (rank 16, all seven projections,
made with ``peft`` on the model's own config), N in ``--adapters`` (0 1 4 8),
and the mean decode-step time is printed beside the base model's (no adapter
bank at all) and the ratio, for both ways the bank applies adapters: grouped
by adapter (the eager step) and stacked with a row mask (the fixed-shape step
CUDA graphs replay; run eagerly on a CPU). The bank holds ``--slots`` (8) adapters, as
``lyre serve --max-adapters 8`` does. Then the time to load one adapter from
disk into a running engine: reading and checking the folder (a worker
thread), and installing it into the bank between two steps.

    .venv/bin/python benchmarks/lora.py
    .venv/bin/python benchmarks/lora.py --batch 64 --context 512 --json lora.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import torch

from lyre.demo_model import demo_model
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.loader import load_llama
from lyre.engine.lora import LoraBank, attach_lora
from lyre.engine.peft_folder import LORA_TARGETS, read_peft_adapter
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 11, 1268, 527, 499, 30, 128009, 128260, 128261, 128257]


def make_adapters(model_folder: Path, root: Path, count: int, rank: int) -> list[Path]:
    """``count`` PEFT LoRA folders (random A and B) for the Llama in ``model_folder``, saved by peft itself."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    folders = []
    for i in range(count):
        torch.manual_seed(i)
        base = LlamaForCausalLM.from_pretrained(model_folder, dtype=torch.float32)
        config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(LORA_TARGETS), init_lora_weights=False)
        folder = root / f"voice{i}"
        get_peft_model(base, config).save_pretrained(folder)
        folders.append(folder)
    return folders


def step_ms(folder: Path, adapters: list[Path], distinct: list[int], batch: int, context: int, slots: int,
            rank: int, steps: int) -> dict[str, dict[str, float]]:
    """Mean decode-step milliseconds with the rows spread over N adapters, per N ("base": no bank at all), for
    the eager step (rows grouped by adapter) and the fixed-shape step (the stacked bank, as CUDA graphs run it;
    eager here, on a CPU)."""
    seq = -(-(context + 64) // 128) * 128
    config = EngineConfig(max_batch=batch, max_seq_len=seq)

    def timed(runner: ModelRunner, n: int) -> float:
        reqs = []
        for slot in range(batch):
            req = Request(f"r{slot}", PROMPT[:1] * (context - 1), SamplingParams(), seed=slot,
                          constraint=AUDIO_CONSTRAINT)
            req.slot, req.output_ids = slot, [128266]
            req.adapter_slot = slot % n if n else None
            reqs.append(req)
        for _ in range(3):
            runner.step([], reqs)  # warm-up
        start = time.perf_counter()
        for _ in range(steps):
            runner.step([], reqs)  # the rows stay at their length: no token is appended
        return 1000 * (time.perf_counter() - start) / steps

    plain = load_llama(folder, seq, "cpu", "float32")
    results: dict[str, dict[str, float]] = {}
    model = load_llama(folder, seq, "cpu", "float32")
    bank = LoraBank(slots, rank, torch.float32, torch.device("cpu"))
    attach_lora(model, bank)
    for slot, path in enumerate(adapters[:slots]):
        bank.install(slot, read_peft_adapter(path.name, path, model.config, rank))
    for form, fixed in (("grouped", False), ("stacked", True)):  # the eager step; the fixed-shape (graph) step
        results[form] = {"base": timed(ModelRunner(plain, config, AUDIO_CONSTRAINT.family, fixed_shape=fixed), 0)}
        runner = ModelRunner(model, config, AUDIO_CONSTRAINT.family, fixed_shape=fixed, bank=bank)
        for n in distinct:
            results[form][str(n)] = timed(runner, n)
    return results


async def load_times(folder: Path, adapters: list[Path], slots: int, rank: int) -> dict[str, float]:
    """Seconds to read one adapter folder, and to load it into an engine that is busy decoding."""
    model = load_llama(folder, 1024, "cpu", "float32")
    read = []
    for path in adapters:
        start = time.perf_counter()
        read_peft_adapter(path.name, path, model.config, rank)
        read.append(time.perf_counter() - start)
    engine = Engine(model, EngineConfig(max_batch=8, max_seq_len=1024, max_adapters=slots, lora_rank=rank),
                    AUDIO_CONSTRAINT.family)
    try:
        busy = [engine.generate(PROMPT, SamplingParams(max_tokens=700), constraint=AUDIO_CONSTRAINT)
                for _ in range(4)]
        consumers = [asyncio.create_task(_drain(s)) for s in busy]
        await asyncio.sleep(0.2)
        loads = []
        for path in adapters:
            engine.adapters.register(path.name, path)  # type: ignore[union-attr]
            start = time.perf_counter()
            await engine.adapters.load(path.name)  # type: ignore[union-attr]
            loads.append(time.perf_counter() - start)
        for task in consumers:
            task.cancel()
        await asyncio.gather(*consumers, return_exceptions=True)
    finally:
        engine.shutdown()
    nbytes = sum(p.stat().st_size for p in adapters[0].iterdir())
    return {"folder_mb": nbytes / 1e6, "read_ms_median": 1000 * sorted(read)[len(read) // 2],
            "load_ms_median": 1000 * sorted(loads)[len(loads) // 2]}


async def _drain(stream) -> None:  # type: ignore[no-untyped-def]
    async for _ in stream:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="an Orpheus folder (default: the demo model)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=256, help="tokens each row attends over")
    parser.add_argument("--adapters", type=int, nargs="+", default=[0, 1, 4, 8], help="distinct adapters per batch")
    parser.add_argument("--slots", type=int, default=8, help="the bank's adapter slots (--max-adapters)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if max(args.adapters) > args.slots:
        parser.error("--adapters cannot exceed --slots")
    torch.manual_seed(0)
    folder = args.model or demo_model().model
    with tempfile.TemporaryDirectory() as tmp:
        adapters = make_adapters(folder, Path(tmp), max(max(args.adapters), 1), args.rank)
        steps = step_ms(folder, adapters, args.adapters, args.batch, args.context, args.slots, args.rank, args.steps)
        loads = asyncio.run(load_times(folder, adapters, args.slots, args.rank))
    print(f"decode step, batch {args.batch}, context {args.context}, bank of {args.slots} x rank {args.rank} "
          f"({torch.get_num_threads()} threads)")
    print(f"{'adapters':>9} {'grouped':>8} {'x base':>7} {'stacked':>8} {'x base':>7}")
    for key in steps["grouped"]:
        row = "".join(f" {steps[f][key]:8.2f} {steps[f][key] / steps[f]['base']:7.2f}" for f in ("grouped", "stacked"))
        print(f"{key:>9}{row}")
    print(f"adapter folder {loads['folder_mb']:.1f} MB: read and check {loads['read_ms_median']:.1f} ms, "
          f"load into a busy engine {loads['load_ms_median']:.1f} ms (medians)")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()},
                                         "step_ms": steps, "load": loads}, indent=2))


if __name__ == "__main__":
    main()
