"""What cloned voices cost: the decode step with 0 to 8 distinct LoRA adapters in one batch, and loading one.

At batch ``--batch`` (32) on the demo model (or ``--model``), the rows are
spread round-robin over N distinct adapters (rank 16, all seven projections,
made with ``peft`` on the model's own config), N in ``--adapters`` (0 1 4 8),
and the mean decode-step time is printed beside the base model's (no adapter
bank at all) and the ratio, for both ways the bank applies adapters: grouped
by adapter (the eager step) and stacked with a row mask (the fixed-shape step
CUDA graphs replay; run eagerly on a CPU). The bank holds ``--slots`` (8) adapters, as
``lyre serve --max-adapters 8`` does. Then the time to load one adapter from
disk into a running engine: reading and checking the folder, and copying it
into a free slot of the bank (both on worker threads, while the engine steps).

``--stream-gap`` measures instead what loading costs the streams already
playing: ``--streams`` (4) streams decode on the engine while 4 adapters load
one after another, ``--rounds`` (5) times (unloaded again between rounds), and
the longest gap between two tokens of any stream is printed for the loads and
for an equally long quiet window just before each (the machine's own noise);
so is the longest the event loop was blocked in a call into the engine
(``stats()``, every 5 ms: what ``generate`` and ``abort`` wait for too).
``--layers 28`` runs it on a model of the demo's width and the 3B's depth
(random weights), whose adapters are as many tensors (392) as the 3B's.

    .venv/bin/python benchmarks/lora.py
    .venv/bin/python benchmarks/lora.py --batch 64 --context 512 --json lora.json
    .venv/bin/python benchmarks/lora.py --stream-gap --layers 28 --rank 64 --json lora_gap.json
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import tempfile
import time
from pathlib import Path

import torch

from lyre.models.demo import DEMO_LLAMA_CONFIG
from lyre.models.choice import choose_model
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.by_hand import ByHand
from lyre.models.loader import load_llama
from lyre.models.lora import LoraBank, attach_lora
from lyre.models.peft_folder import LORA_TARGETS, read_peft_adapter
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 11, 1268, 527, 499, 30, 128009, 128260, 128261, 128257]


def deep_model(root: Path, layers: int) -> Path:
    """The demo model's shape with ``layers`` decoder layers (random weights), saved by transformers."""
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    spec = copy.deepcopy(DEMO_LLAMA_CONFIG)  # transformers edits rope_scaling in place
    spec.pop("architectures", None)
    LlamaForCausalLM(HFConfig(**{**spec, "num_hidden_layers": layers})).save_pretrained(root / "model")
    return root / "model"


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
        hand = ByHand(runner)  # a fresh pool's blocks: the last timing's rows are done with theirs
        reqs = []
        for slot in range(batch):  # rows placed at their context, with its blocks: no prefill
            req = Request(f"r{slot}", PROMPT[:1] * (context - 1), SamplingParams(), seed=slot,
                          constraint=AUDIO_CONSTRAINT)
            req.output_ids = [128266]
            req.adapter_slot = slot % n if n else None
            hand.place(req, slot)
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


async def stream_gaps(folder: Path, adapters: list[Path], slots: int, rank: int, streams: int,
                      rounds: int) -> dict[str, float]:
    """Milliseconds between two tokens of the playing streams: the longest while 4 adapters load one after
    another, and the longest in a quiet window of the same length just before (over ``rounds`` rounds)."""
    model = load_llama(folder, 1024, "cpu", "float32")
    engine = Engine(model, EngineConfig(max_batch=streams, max_seq_len=1024, max_adapters=slots, lora_rank=rank),
                    AUDIO_CONSTRAINT.family)
    arrivals: list[list[float]] = []  # per request: when each of its tokens reached its consumer

    async def play(i: int) -> None:
        while True:  # one long request after another, each as long as a slot holds (gaps within a request)
            times: list[float] = []
            arrivals.append(times)
            sampling = SamplingParams(max_tokens=1000, seed=i)
            async for _ in engine.generate(PROMPT, sampling, constraint=AUDIO_CONSTRAINT):
                times.append(time.perf_counter())

    calls: list[tuple[float, float]] = []  # (when a call into the engine returned, seconds it blocked the loop)

    async def probe() -> None:
        while True:
            start = time.perf_counter()
            engine.stats()  # takes the engine's lock, as generate and abort do
            calls.append((time.perf_counter(), time.perf_counter() - start))
            await asyncio.sleep(0.005)

    def longest(start: float, end: float) -> float:
        return max((b - a for times in arrivals for a, b in zip(times, times[1:]) if start < b <= end), default=0.0)

    def longest_call(start: float, end: float) -> float:
        return max((blocked for at, blocked in calls if start < at <= end), default=0.0)

    players = [asyncio.create_task(play(i)) for i in range(streams)] + [asyncio.create_task(probe())]
    quiet, loading, load_ms, quiet_call, loading_call = [], [], [], [], []
    try:
        await asyncio.sleep(0.5)  # every stream admitted and decoding
        for r in range(rounds):
            names = [f"{r}-{path.name}" for path in adapters[:4]]
            began = time.perf_counter()
            for name, path in zip(names, adapters):
                engine.adapters.register(name, path)  # type: ignore[union-attr]
                await engine.adapters.load(name)  # type: ignore[union-attr]
            ended = time.perf_counter()
            await asyncio.sleep(0.05)  # the last tokens of the window arrive
            quiet.append(longest(began - (ended - began), began))
            loading.append(longest(began, ended + 0.05))
            quiet_call.append(longest_call(began - (ended - began), began))
            loading_call.append(longest_call(began, ended + 0.05))
            load_ms.append(1000 * (ended - began) / len(names))
            for name in names:
                await engine.adapters.unload(name)  # type: ignore[union-attr]
            await asyncio.sleep(max(0.3, 1.5 * (ended - began)))  # the next quiet window holds no unload
    finally:
        for task in players:
            task.cancel()
        await asyncio.gather(*players, return_exceptions=True)
        engine.shutdown()
    return {"quiet_max_gap_ms": 1000 * max(quiet), "loading_max_gap_ms": 1000 * max(loading),
            "loading_max_gap_ms_per_round": [round(1000 * g, 2) for g in loading],  # type: ignore[dict-item]
            "quiet_max_gap_ms_per_round": [round(1000 * g, 2) for g in quiet],  # type: ignore[dict-item]
            "loading_max_call_ms": 1000 * max(loading_call), "quiet_max_call_ms": 1000 * max(quiet_call),
            "load_ms_mean": sum(load_ms) / len(load_ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, help="an Orpheus folder (default: the demo model)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--context", type=int, default=256, help="tokens each row attends over")
    parser.add_argument("--adapters", type=int, nargs="+", default=[0, 1, 4, 8], help="distinct adapters per batch")
    parser.add_argument("--slots", type=int, default=8, help="the bank's adapter slots (--max-adapters)")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--stream-gap", action="store_true",
                        help="only measure the longest gap between tokens of playing streams while adapters load")
    parser.add_argument("--streams", type=int, default=4, help="playing streams (--stream-gap)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of 4 loads (--stream-gap)")
    parser.add_argument("--layers", type=int, help="--stream-gap on the demo's width with this many layers")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if args.stream_gap:
        stream_gap_main(args)
        return
    if max(args.adapters) > args.slots:
        parser.error("--adapters cannot exceed --slots")
    torch.manual_seed(0)
    folder = choose_model(args.model).local()  # None: the demo, said on stderr
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


def stream_gap_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = deep_model(Path(tmp), args.layers) if args.layers else choose_model(args.model).local()
        torch.manual_seed(0)
        adapters = make_adapters(folder, Path(tmp), 4, args.rank)
        gaps = asyncio.run(stream_gaps(folder, adapters, args.slots, args.rank, args.streams, args.rounds))
        nbytes = sum(p.stat().st_size for p in adapters[0].iterdir())
    model = f"{args.layers}-layer model of the demo's width" if args.layers else "demo model"
    print(f"{model}: {args.streams} streams playing, 4 adapters (rank {args.rank}, {nbytes / 1e6:.1f} MB folders) "
          f"loaded one after another, {args.rounds} rounds ({torch.get_num_threads()} threads)")
    print(f"longest gap between two tokens: {gaps['loading_max_gap_ms']:.1f} ms while loading, "
          f"{gaps['quiet_max_gap_ms']:.1f} ms in as long a quiet window before; a load took "
          f"{gaps['load_ms_mean']:.1f} ms (mean)")
    print(f"per round, loading: {gaps['loading_max_gap_ms_per_round']}; quiet: {gaps['quiet_max_gap_ms_per_round']}")
    print(f"longest call into the engine from the event loop: {gaps['loading_max_call_ms']:.1f} ms while loading, "
          f"{gaps['quiet_max_call_ms']:.1f} ms in the quiet windows")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "gaps": gaps}, indent=2))


if __name__ == "__main__":
    main()
