"""Voices as LoRA adapters: peft's own adapters, batched with the base model in one step, loaded and evicted live."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaForCausalLM

from adapters import diverged_copy, make_adapter
from forcing import assert_rows_match, forced_run, gap, request
from llama_calls import cache_for, prefill
from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.adapters import AdapterBusy, AdapterInUse, AdapterRegistry, UnknownAdapter
from lyre.models.config import LlamaConfig
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from lyre.models.lora import LoraBank, attach_lora
from lyre.models.peft_folder import AdapterError, AdapterWeights, read_peft_adapter
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 13, 128009, 128260, 128261, 128257]
OTHER = [128259, 128000, 40, 1093, 13, 128009, 128260, 128261, 128257]
# Batched against alone in float32: float error is about 1e-6 here; an adapter moves logits by more than 0.1.
BATCH_ATOL = 1e-4


@pytest.fixture(scope="module")
def folders(demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return {
        "calm": make_adapter(root / "calm", demo.model, seed=1, r=8, alpha=16, speaker="calm-voice"),
        "bright": make_adapter(root / "bright", demo.model, seed=2, r=16, alpha=16),
        "third": make_adapter(root / "third", demo.model, seed=3, r=4, alpha=8),
    }


def _model(demo: DemoPaths, slots: int = 4, rank: int = 16) -> tuple[Llama, LoraBank]:
    model = load_llama(demo.model, 256, "cpu", "float32")
    bank = LoraBank(slots, rank, torch.float32, torch.device("cpu"))
    attach_lora(model, bank)
    return model, bank


@torch.inference_mode()
def test_an_adapters_logits_match_peft_and_the_merged_weights(demo: DemoPaths, folders: dict[str, Path]) -> None:
    from peft import PeftModel

    model, bank = _model(demo)
    bank.install(2, read_peft_adapter("calm", folders["calm"], model.config, 16))  # rank 8, padded to 16
    bank.use(bank.row_mask(torch.tensor([2, -1])))  # the same prompt, once with the adapter, once without
    hidden = prefill(model, cache_for(model, 2, 64), [PROMPT, PROMPT], [0, 1])
    ours = model.logits(hidden[0])
    base = LlamaForCausalLM.from_pretrained(demo.model, dtype=torch.float32).eval()
    plain = base(torch.tensor([PROMPT])).logits[0]
    peft = PeftModel.from_pretrained(base, folders["calm"]).eval()
    theirs = peft(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(ours, theirs, atol=1e-4, rtol=0)
    merged = peft.merge_and_unload()(torch.tensor([PROMPT])).logits[0]
    torch.testing.assert_close(ours, merged, atol=1e-4, rtol=0)
    torch.testing.assert_close(model.logits(hidden[1]), plain, atol=1e-4, rtol=0)  # the base row is untouched
    assert (ours - plain).abs().max() > 0.1  # and the adapter does change the output
    bank.group([-1, 2])  # the eager form, rows grouped by adapter: the same logits
    hidden = prefill(model, cache_for(model, 2, 64), [PROMPT, PROMPT], [0, 1])
    torch.testing.assert_close(model.logits(hidden[1]), theirs, atol=1e-4, rtol=0)
    torch.testing.assert_close(model.logits(hidden[0]), plain, atol=1e-4, rtol=0)


@pytest.fixture
def engine(demo: DemoPaths) -> Iterator[Engine]:
    model = load_llama(demo.model, 512, "cpu", "float32")
    engine = Engine(model, EngineConfig(max_batch=6, max_seq_len=512, max_adapters=2, lora_rank=16),
                    AUDIO_CONSTRAINT.family)
    yield engine
    engine.shutdown()


def _speech(seed: int, tokens: int = 42) -> SamplingParams:
    return SamplingParams(seed=seed, max_tokens=tokens, stop_ids=(orpheus.STOP_TOKEN,))


async def _tokens(engine: Engine, prompt: list[int], seed: int, adapter: str | None, tokens: int = 42) -> list[int]:
    return [t async for t in engine.generate(prompt, _speech(seed, tokens), constraint=AUDIO_CONSTRAINT,
                                             adapter=adapter)]


def test_one_batch_mixes_the_base_model_and_two_adapters_each_as_if_alone(demo: DemoPaths,
                                                                          folders: dict[str, Path]) -> None:
    model, bank = _model(demo, slots=2)
    bank.install(0, read_peft_adapter("calm", folders["calm"], model.config, 16))
    bank.install(1, read_peft_adapter("bright", folders["bright"], model.config, 16))
    runner = ModelRunner(model, EngineConfig(max_batch=6, max_seq_len=256), AUDIO_CONSTRAINT.family, bank=bank)
    rows = [(PROMPT, 1, None), (PROMPT, 1, 0), (OTHER, 2, 1), (OTHER, 3, 0)]  # (prompt, seed, LoRA slot)

    def reqs() -> list[Request]:
        return [request(p, s, _speech(s), i, a, AUDIO_CONSTRAINT) for i, (p, s, a) in enumerate(rows)]

    alone = [forced_run(runner, [req], 21)[0] for req in reqs()]  # three frames, two frame boundaries
    together = forced_run(runner, reqs(), 21, feed=[a.fed for a in alone])
    assert_rows_match(together, alone, atol=BATCH_ATOL)  # the base row too: adapter rows beside it move nothing
    # The same prompt and draws with and without an adapter: it moves the logits far beyond the tolerance,
    # so a leak into another row could not hide inside it.
    assert gap(alone[1].logits[0], alone[0].logits[0]) > 1000 * BATCH_ATOL
    assert [t.drawn[:7] for t in together] == [a.drawn[:7] for a in alone]  # the first frame's draws, robustly


def test_the_engine_serves_a_batch_of_voices_and_counts_its_adapter_loads(engine: Engine,
                                                                         folders: dict[str, Path]) -> None:
    adapters = engine.adapters
    assert adapters is not None
    adapters.register("calm", folders["calm"])
    adapters.register("bright", folders["bright"])
    rows = [(PROMPT, 1, None), (PROMPT, 1, "calm"), (OTHER, 2, "bright"), (OTHER, 3, "calm")]

    async def main() -> tuple[list[list[int]], list[list[int]]]:
        leases = [await adapters.lease("calm"), await adapters.lease("bright")]
        assert [lease.hit for lease in leases] == [False, False] and leases[0].speaker == "calm-voice"
        alone = [await _tokens(engine, p, s, a) for p, s, a in rows]
        together = await asyncio.gather(*(_tokens(engine, p, s, a) for p, s, a in rows))
        for lease in leases:
            lease.release()
        return alone, list(together)

    alone, together = asyncio.run(main())
    assert [len(t) for t in together] == [len(t) for t in alone] == [42] * 4
    # Sampled tokens agree batched and alone only while float error flips no draw (see tests/forcing.py):
    # the first frame is compared; the logits of every step are, in the test above.
    assert [t[:7] for t in together] == [t[:7] for t in alone]
    assert alone[0][:7] != alone[1][:7]  # the same prompt and seed: the adapter changed the voice's tokens
    stats = adapters.registry.stats
    assert stats.loads == 2 and stats.misses == 2 and stats.evictions == 0


def test_adapters_load_and_leave_while_a_stream_plays_without_changing_it(engine: Engine,
                                                                          folders: dict[str, Path]) -> None:
    adapters = engine.adapters
    assert adapters is not None
    for name in ("calm", "bright", "third"):
        adapters.register(name, folders[name])

    async def main() -> tuple[list[int], list[int]]:
        lease = await adapters.lease("calm")
        alone = await _tokens(engine, PROMPT, 5, "calm", tokens=140)
        running = asyncio.create_task(_tokens(engine, PROMPT, 5, "calm", tokens=140))
        await asyncio.sleep(0)  # submitted; now the other slot changes hands twice while it runs
        await adapters.load("bright")
        await adapters.load("third")  # evicts bright: calm is held, so it stays
        await adapters.unload("third")
        lease.release()
        return alone, await running

    alone, during = asyncio.run(main())
    assert during == alone
    registry = adapters.registry
    assert registry.stats.evictions == 1 and not registry.get("bright").resident and "third" not in registry.entries


def test_unloading_an_adapter_in_use_needs_force_and_ends_its_streams_with_an_error(
        engine: Engine, folders: dict[str, Path]) -> None:
    adapters = engine.adapters
    assert adapters is not None
    adapters.register("calm", folders["calm"])

    async def main() -> None:
        lease = await adapters.lease("calm")
        stream = engine.generate(PROMPT, _speech(1, 490), constraint=AUDIO_CONSTRAINT, adapter="calm")
        await stream.take(1)
        with pytest.raises(AdapterInUse, match="running on it"):
            await adapters.unload("calm")
        await adapters.unload("calm", force=True)
        with pytest.raises(RuntimeError, match="adapter 'calm' was unloaded"):
            while await stream.take(1):
                pass
        lease.release()
        with pytest.raises(UnknownAdapter, match="unknown adapter 'calm'"):
            await adapters.lease("calm")

    asyncio.run(main())
    assert engine.stats().running == 0


def _folder_with(tmp_path: Path, source: Path, name: str, change: dict) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    config = json.loads((source / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **change}))
    (folder / "adapter_model.safetensors").write_bytes((source / "adapter_model.safetensors").read_bytes())
    return folder


def test_every_kind_of_bad_folder_is_refused_naming_why_and_nothing_is_half_loaded(
        engine: Engine, demo: DemoPaths, folders: dict[str, Path], tmp_path: Path) -> None:
    from transformers import LlamaConfig as HFConfig
    from transformers import LlamaForCausalLM as HFLlama

    adapters = engine.adapters
    assert adapters is not None
    small = tmp_path / "small-base"
    HFLlama(HFConfig(vocab_size=156940, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=32)).save_pretrained(small)
    bad = {
        "dora": (make_adapter(tmp_path / "dora", demo.model, seed=4, use_dora=True), "DoRA"),
        "embed": (make_adapter(tmp_path / "embed", demo.model, seed=5, modules_to_save=["embed_tokens"],
                                ensure_weight_tying=True),
                  "saves whole modules"),
        "head": (make_adapter(tmp_path / "head", demo.model, seed=6, target_modules=["q_proj", "lm_head"],
                                ensure_weight_tying=True),
                 "it targets .*; lyre adapts only q_proj"),
        "wide": (make_adapter(tmp_path / "wide", demo.model, seed=7, r=128, alpha=128), "rank 128 is above 64"),
        "rank32": (make_adapter(tmp_path / "rank32", demo.model, seed=8, r=32), "--lora-rank 32"),
        "other-base": (make_adapter(tmp_path / "other", small, seed=9), "another base model"),
        "json": (_folder_with(tmp_path, folders["calm"], "json", {"peft_type": "PREFIX_TUNING"}), "only LORA"),
        "none": (tmp_path / "missing", "does not exist"),
    }
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text("{half")
    bad["broken"] = (tmp_path / "broken", "not valid JSON")
    adapters.register("calm", folders["calm"])

    async def main() -> tuple[list[int], list[int]]:
        lease = await adapters.lease("calm")
        before = await _tokens(engine, PROMPT, 1, "calm")
        for name, (folder, reason) in bad.items():
            adapters.register(name, folder)
            with pytest.raises(AdapterError, match=reason):
                await adapters.load(name)
            assert not adapters.registry.get(name).resident
        after = await _tokens(engine, PROMPT, 1, "calm")
        lease.release()
        return before, after

    before, after = asyncio.run(main())
    assert after == before  # the failed loads touched no slot
    assert adapters.registry.stats.loads == 1


def test_eviction_takes_the_least_recently_used_and_respects_pins_holders_and_bytes() -> None:
    registry = AdapterRegistry(slots=2, max_bytes=300)
    a, b, c, d = (registry.register(n, Path(n), n) for n in "abcd")
    registry.install(a, *registry.place(a, 100)[:1], 100, [], 0.1)
    registry.install(b, *registry.place(b, 100)[:1], 100, [], 0.1)
    registry.hold(a)
    registry.release(a)  # a is now the most recently used
    slot, evict = registry.place(c, 100)
    assert evict == [b] and slot == b.slot  # both slots taken: the least recently used leaves
    registry.install(c, slot, 100, evict, 0.1)
    a.pinned = True
    registry.hold(c)
    with pytest.raises(AdapterBusy, match="no room for adapter 'd'"):
        registry.place(d, 100)  # a pinned, c held: nothing may leave
    registry.release(c)
    slot, evict = registry.place(d, 200)  # the byte budget: 100 (a) + 200 fits only once c leaves
    assert evict == [c]
    with pytest.raises(AdapterBusy):
        registry.place(d, 400)  # more than the whole budget
    with pytest.raises(UnknownAdapter):
        registry.get("e")
    with pytest.raises(ValueError, match="already registered"):
        registry.register("a", Path("x"), "a")


def test_the_fixed_shape_step_serves_adapters_as_the_eager_one_does(demo: DemoPaths, folders: dict[str, Path]) -> None:
    runs = {}
    rows = [(PROMPT, None), (PROMPT, 1), (OTHER, 1)]  # (prompt, LoRA slot)
    for fixed in (False, True):
        model, bank = _model(demo, slots=2)
        bank.install(1, read_peft_adapter("calm", folders["calm"], model.config, 16))
        runner = ModelRunner(model, EngineConfig(max_batch=8, max_seq_len=256), AUDIO_CONSTRAINT.family,
                             fixed_shape=fixed, bank=bank)
        reqs = [request(p, i, _speech(i, 60), i, a, AUDIO_CONSTRAINT) for i, (p, a) in enumerate(rows)]
        runs[fixed] = forced_run(runner, reqs, 21, feed=[r.fed for r in runs[False]] if fixed else None)
    # The mask form (every row through the bank, padded to a bucket) and the grouped form differ in float
    # error only; a base row's mask is all zeros.
    assert_rows_match(runs[True], runs[False], atol=BATCH_ATOL)
    assert [r.drawn[:7] for r in runs[True]] == [r.drawn[:7] for r in runs[False]]
    assert gap(runs[False][1].logits[0], runs[False][0].logits[0]) > 1000 * BATCH_ATOL


# -- one voice never hurts another ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_folder_holding_nan_or_inf_is_refused_naming_the_file_and_the_tensor(
        engine: Engine, demo: DemoPaths, folders: dict[str, Path], tmp_path: Path, value: float) -> None:
    folder = tmp_path / "diverged"
    key = diverged_copy(folders["calm"], folder, "layers.1.mlp.down_proj.lora_B", value)
    config = LlamaConfig.from_hf(json.loads((demo.model / "config.json").read_text()))
    with pytest.raises(AdapterError) as refused:
        read_peft_adapter("diverged", folder, config, 16)
    assert "adapter_model.safetensors" in str(refused.value) and key in str(refused.value)
    assert "NaN" in str(refused.value) or "inf" in str(refused.value)
    adapters = engine.adapters
    assert adapters is not None
    adapters.register("diverged", folder)
    with pytest.raises(AdapterError, match=key.replace(".", r"\.")):
        asyncio.run(adapters.load("diverged"))
    assert not adapters.registry.get("diverged").resident and adapters.registry.stats.loads == 0


def test_the_bank_refuses_weights_that_are_not_finite_in_its_own_dtype(demo: DemoPaths,
                                                                       folders: dict[str, Path]) -> None:
    model = load_llama(demo.model, 256, "cpu", "float32")
    good = read_peft_adapter("calm", folders["calm"], model.config, 16)
    key = next(iter(good.weights))
    a, b = good.weights[key]
    half = LoraBank(2, 16, torch.float16, torch.device("cpu"))
    attach_lora(model, half)
    for bad in (float("nan"), 1e6):  # NaN, read past the folder check; a float32 value float16 cannot hold
        poisoned = a.clone()
        poisoned[0, 0] = bad
        weights = AdapterWeights("bad", good.path, good.rank, good.scale, {**good.weights, key: (poisoned, b)})
        with pytest.raises(AdapterError, match=f"layer {key[0]} {key[1]}"):
            half.install(1, weights)
    assert all(not t[1].any() for t in (*half.a.values(), *half.b.values()))  # nothing written to the slot
    assert float(half.scales[1]) == 0.0


def test_clearing_a_slot_zeroes_its_weights_so_nothing_outlives_an_unload(demo: DemoPaths,
                                                                          folders: dict[str, Path]) -> None:
    model, bank = _model(demo, slots=2)
    bank.install(1, read_peft_adapter("calm", folders["calm"], model.config, 16))
    assert any(t[1].any() for t in bank.a.values())
    bank.clear(1)
    assert all(not t[1].any() for t in (*bank.a.values(), *bank.b.values())) and float(bank.scales[1]) == 0.0


def _poison(bank: LoraBank, slot: int, a: bool, b: bool) -> None:
    """Slot ``slot`` as a diverged adapter would leave it had it got past every check: NaN weights, a live scale."""
    for key in bank.a:
        if a:
            bank.a[key][slot] = float("nan")
        if b:
            bank.b[key][slot] = float("nan")


@pytest.mark.parametrize(("fixed", "poison_b"), [(False, True), (True, False), (True, True)])
def test_a_poisoned_slot_reaches_no_row_of_the_base_model_or_of_another_adapter(
        demo: DemoPaths, folders: dict[str, Path], fixed: bool, poison_b: bool) -> None:
    # Row 0 is the base model, rows 1-2 adapter "calm" (slot 0), row 3 the poisoned slot 1: its one-row group is
    # padded to two in the grouped form, and the padding must not land on row 0.
    rows = [(PROMPT, None), (PROMPT, 0), (OTHER, 0), (OTHER, 1)]
    runs = {}
    for poisoned in (False, True):
        model, bank = _model(demo, slots=2)
        bank.install(0, read_peft_adapter("calm", folders["calm"], model.config, 16))
        bank.install(1, read_peft_adapter("third", folders["third"], model.config, 16))
        if poisoned:
            _poison(bank, 1, a=True, b=poison_b)
        runner = ModelRunner(model, EngineConfig(max_batch=6, max_seq_len=256), AUDIO_CONSTRAINT.family,
                             fixed_shape=fixed, bank=bank)
        reqs = [request(p, i, _speech(i), i, a, AUDIO_CONSTRAINT) for i, (p, a) in enumerate(rows)]
        runs[poisoned] = forced_run(runner, reqs, 8, feed=[r.fed for r in runs[False]] if poisoned else None)
    assert not torch.isfinite(runs[True][3].logits).any()  # the poisoned row itself is lost
    # The stacked (fixed-shape) form sums every slot's B: NaN there reaches only rows on no adapter, which are
    # selected, not masked. The bank never holds such a B: it refuses non-finite weights and zeroes what it clears.
    clean = [0] if fixed and poison_b else [0, 1, 2]
    for i in clean:
        untouched = torch.equal(torch.isfinite(runs[True][i].logits), torch.isfinite(runs[False][i].logits))
        assert untouched, f"row {i}: the poisoned slot's NaN reached it"
        assert gap(runs[True][i].logits, runs[False][i].logits) <= BATCH_ATOL, f"row {i}"


def test_a_waiter_that_gives_up_on_a_load_cancels_only_itself(engine: Engine, folders: dict[str, Path],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import lyre.engine.adapters as loading

    adapters = engine.adapters
    assert adapters is not None
    adapters.register("calm", folders["calm"])
    gate = threading.Event()
    read = loading.read_peft_adapter

    def slow_read(*args: object, **kwargs: object) -> AdapterWeights:
        gate.wait(30)
        return read(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(loading, "read_peft_adapter", slow_read)

    async def main() -> None:
        first = asyncio.create_task(adapters.lease("calm"))  # starts the load
        second = asyncio.create_task(adapters.lease("calm"))  # waits for the same load
        third = asyncio.create_task(adapters.load("calm"))
        for _ in range(10):
            await asyncio.sleep(0)
        first.cancel()  # the caller that started the load hangs up
        await asyncio.sleep(0.05)
        gate.set()
        lease = await asyncio.wait_for(second, 30)
        await asyncio.wait_for(third, 30)
        with pytest.raises(asyncio.CancelledError):
            await first
        assert not lease.hit and adapters.registry.get("calm").resident
        assert adapters.registry.get("calm").holders == 1  # the cancelled lease holds nothing
        lease.release()

    asyncio.run(main())
    assert adapters.registry.stats.loads == 1


def test_an_adapter_is_copied_in_a_layer_per_step_without_the_engines_lock_while_a_stream_plays(
        engine: Engine, folders: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    adapters = engine.adapters
    assert adapters is not None
    adapters.register("calm", folders["calm"])
    fill = LoraBank.fill
    steps: list[int] = []  # the engine's step count as each layer is copied
    lock_free: list[bool] = []

    def try_lock() -> None:  # from another thread: an RLock held by the copying thread would make it wait
        got = engine.lock.acquire(timeout=2)
        if got:
            engine.lock.release()
        lock_free.append(got)

    def watched(bank: LoraBank, slot: int, adapter: Any) -> Iterator[None]:
        for _ in fill(bank, slot, adapter):
            steps.append(engine.recorder.steps)
            probe = threading.Thread(target=try_lock)
            probe.start()
            probe.join()
            yield

    monkeypatch.setattr(LoraBank, "fill", watched)
    # No pause between two steps fits more than one layer: the demo's small adapter would go in at once.
    monkeypatch.setattr("lyre.engine.engine._PAUSE_S", 0.0)

    async def main() -> None:
        async with engine.generate(PROMPT, _speech(1, 490), constraint=AUDIO_CONSTRAINT) as playing:
            await playing.take(1)
            await adapters.load("calm")
            assert not playing.ended  # the stream played on through the load

    asyncio.run(main())
    layers = engine.runner.model.config.num_hidden_layers  # type: ignore[attr-defined]
    assert len(steps) == layers and all(lock_free)
    assert all(later > earlier for earlier, later in zip(steps, steps[1:]))  # a step between each two layers
    assert adapters.registry.get("calm").resident
