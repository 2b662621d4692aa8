"""Voices as LoRA adapters: peft's own adapters, batched with the base model in one step, loaded and evicted live."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from adapters import make_adapter
from llama_calls import cache_for, prefill
from lyre import orpheus
from lyre.demo_model import DemoPaths
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.adapters import AdapterBusy, AdapterInUse, AdapterRegistry, UnknownAdapter
from lyre.engine.llama import Llama
from lyre.engine.loader import load_llama
from lyre.engine.lora import LoraBank, attach_lora
from lyre.engine.peft_folder import AdapterError, read_peft_adapter
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 13, 128009, 128260, 128261, 128257]
OTHER = [128259, 128000, 40, 1093, 13, 128009, 128260, 128261, 128257]


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


def test_one_batch_mixes_the_base_model_and_two_adapters_each_as_if_alone(engine: Engine,
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
    assert together == alone
    assert alone[0] != alone[1]  # the same prompt and seed: the adapter changed the voice's tokens
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
    tokens = {}
    for fixed in (False, True):
        model, bank = _model(demo, slots=2)
        bank.install(1, read_peft_adapter("calm", folders["calm"], model.config, 16))
        runner = ModelRunner(model, EngineConfig(max_batch=8, max_seq_len=256), AUDIO_CONSTRAINT.family,
                             fixed_shape=fixed, bank=bank)
        reqs = []
        for i, (prompt, slot) in enumerate([(PROMPT, None), (PROMPT, 1), (OTHER, 1)]):
            req = Request(f"r{i}", prompt, _speech(i, 60), seed=i, constraint=AUDIO_CONSTRAINT)
            req.slot, req.adapter_slot = i, slot
            reqs.append(req)
        for req, token in zip(reqs, runner.step(reqs, [])):
            req.output_ids.append(token)
        for _ in range(20):
            for req, token in zip(reqs, runner.step([], reqs)):
                req.output_ids.append(token)
        tokens[fixed] = [r.output_ids for r in reqs]
    assert tokens[True] == tokens[False]
    assert tokens[False][0] != tokens[False][1]
