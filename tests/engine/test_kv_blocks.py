"""The block KV cache through the runner and the engine: a reused prefix, a chunked prompt and a preempted
request each give the logits a whole fresh prefill gives (teacher-forced, within float error)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
from forcing import FEED, sampled_logits

from lyre.models.demo import DemoPaths
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.by_hand import ByHand
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request

ATOL = 1e-4
VOICE = [128259, 128000, 83, 5169, 25]  # start of human, "tara:"
TEXT_A = [22691, 1070, 11, 1268, 527, 499, 3432, 30, 358, 1097, 7060, 13, 3639, 922, 499, 30, 220]
TEXT_B = [40, 1093, 279, 2294, 1938, 13]
END = [128009, 128260, 128261, 128257]


@pytest.fixture(scope="module")
def model(demo: DemoPaths) -> Llama:
    return load_llama(demo.model, max_seq_len=256, device="cpu", dtype="float32")


def _req(rid: str, prompt: list[int]) -> Request:
    return Request(rid, list(prompt), SamplingParams(temperature=0.6, max_tokens=64), seed=3)


def _forced(hand: ByHand, req: Request, slot: int, chunk: int | None = None) -> torch.Tensor:
    """Place ``req``, prefill it (in chunks of ``chunk``), then decode it fed FEED: the logits of each step
    that sampled, (1 + len(FEED), V)."""
    hand.place(req, slot)
    with sampled_logits() as calls:
        while not hand.prefill([req], chunk):
            pass
        for token in FEED:
            req.output_ids.append(token)
            hand.decode([req])
    return torch.cat(calls)


def _runner(model: Llama, **kwargs: Any) -> ModelRunner:
    # Blocks of 16, so these short prompts hold several (a CPU's default is 64).
    return ModelRunner(model, EngineConfig(**{"max_batch": 4, "max_seq_len": 256, "block_size": 16, **kwargs}))


@torch.inference_mode()
def test_a_reused_prefix_gives_the_logits_of_prefilling_it(model: Llama) -> None:
    prompt_b = VOICE + TEXT_A[:12] + TEXT_B + END  # shares its first 17 tokens (one block) with A's prompt
    fresh = _forced(ByHand(_runner(model)), _req("b", prompt_b), slot=0)
    hand = ByHand(_runner(model), caching=True)
    _forced(hand, _req("a", VOICE + TEXT_A + END), slot=1)
    b = _req("b", prompt_b)
    reused = _forced(hand, b, slot=2)
    assert b.kv is not None and b.kv.reused == 16  # the first block came from A's
    assert hand.blocks.stats().hits == 1
    assert reused.shape == fresh.shape == (1 + len(FEED), model.config.vocab_size)  # no broadcast hides a step
    gap = float((reused - fresh).abs().max())
    assert gap <= ATOL, f"reused-prefix logits differ from a fresh prefill's by {gap:.2e}"


@torch.inference_mode()
def test_a_prompt_in_chunks_gives_the_logits_of_one_prefill(model: Llama) -> None:
    prompt = VOICE + TEXT_A + TEXT_B + END  # 32 tokens
    whole = _forced(ByHand(_runner(model)), _req("p", prompt), slot=0)
    for chunk in (5, 16):
        chunked = _forced(ByHand(_runner(model)), _req("p", prompt), slot=1, chunk=chunk)
        assert chunked.shape == whole.shape
        gap = float((chunked - whole).abs().max())
        assert gap <= ATOL, f"chunks of {chunk}: logits differ from one prefill by {gap:.2e}"


@torch.inference_mode()
def test_a_preempted_request_resumes_with_the_logits_and_draws_it_would_have_had(model: Llama) -> None:
    prompt = VOICE + TEXT_B + END
    runner = _runner(model)
    straight = _forced(ByHand(runner), _req("s", prompt), slot=0)
    hand = ByHand(runner)
    req = _req("r", prompt)
    hand.place(req, 1)
    with sampled_logits() as calls:
        hand.prefill([req])
        for token in FEED[:5]:
            req.output_ids.append(token)
            hand.decode([req])
        hand.release(req)  # preempted: its blocks back to the pool, its tokens kept
        hand.place(req, 2)  # resumed in another row
        assert req.kv is not None and req.kv.computed == 0
        hand.prefill([req])  # prompt and the five fed tokens again: the sixth step's logits
        assert runner.drawn[2].item() == 6  # its seventh draw next, as if never stopped
        for token in FEED[5:]:
            req.output_ids.append(token)
            hand.decode([req])
    # calls[6], the resumption's prefill, repeats the step that came after the fifth fed token.
    resumed = torch.cat(calls[:6] + calls[7:])
    assert resumed.shape == straight.shape
    gap = float((resumed - straight).abs().max())
    assert gap <= ATOL, f"a resumed request's logits differ from an uninterrupted run's by {gap:.2e}"
    assert float((calls[6] - straight[5]).abs().max()) <= ATOL


@torch.inference_mode()
def test_a_request_whose_keys_were_nan_leaves_nothing_in_the_blocks_the_next_one_gets(model: Llama) -> None:
    # A broken voice (an adapter gone NaN) writes NaN keys and values into its blocks. Attention masks the
    # positions past a row's length, but a masked key still enters its sums as weight 0, and 0 x NaN is NaN:
    # the next request placed in those blocks (a partial last block's stale tail) would speak NaN.
    prompt = VOICE + TEXT_A + END
    clean = _forced(ByHand(_runner(model)), _req("p", prompt), slot=0)
    runner = _runner(model)
    hand = ByHand(runner)
    broken = _req("broken", prompt + FEED)
    hand.place(broken, 0)
    assert broken.kv is not None
    cache, size = runner.cache, runner.block_size
    where = torch.tensor([b * size + i for b in broken.kv.blocks for i in range(size)])
    nan = torch.full((where.numel(), cache.k.shape[1], cache.k.shape[-1]), float("nan"))
    for layer in range(cache.k.shape[0]):
        cache.write(layer, where, nan, nan)
    hand.release(broken)
    after = _forced(hand, _req("p", prompt), slot=0)
    assert torch.isfinite(after).all(), "the last request's NaN reached the next one's logits"
    assert float((after - clean).abs().max()) <= ATOL


def test_a_pool_smaller_than_every_request_at_its_longest_serves_them_all_by_preempting(model: Llama) -> None:
    # 8 blocks of 16: room for one request at its longest (6 blocks), not four of 5 blocks each.
    per_block = 2 * model.config.num_hidden_layers * model.config.num_key_value_heads * 16 * model.config.head_dim * 4
    config = EngineConfig(max_batch=4, max_seq_len=96, kv_cache_bytes=8 * per_block, seed=1, block_size=16)
    engine = Engine(model, config)
    try:
        prompts = [VOICE + TEXT_A[: 3 + i] + END for i in range(4)]

        async def run() -> list[list[int]]:
            streams = [engine.generate(p, SamplingParams(temperature=0.6, max_tokens=60)) for p in prompts]
            return [[t async for t in s] for s in streams]

        outputs = asyncio.run(run())
        stats = engine.stats()
    finally:
        engine.shutdown()
    assert [len(o) for o in outputs] == [60] * 4
    assert stats.preemptions > 0
    assert stats.kv_cache is not None and stats.kv_cache.total == 8 and stats.kv_cache.used == 0


def test_a_conversation_reuses_its_history_turn_after_turn(model: Llama) -> None:
    engine = Engine(model, EngineConfig(max_batch=2, max_seq_len=256, seed=1, block_size=16))
    try:
        async def turn(prompt: list[int]) -> list[int]:
            return [t async for t in engine.generate(prompt, SamplingParams(temperature=0.6, max_tokens=8))]

        history = VOICE + TEXT_A + END
        reply = asyncio.run(turn(history))
        asyncio.run(turn(history + reply + TEXT_B + END))
        stats = engine.stats().kv_cache
    finally:
        engine.shutdown()
    assert stats is not None
    # The first turn sealed two blocks (its prompt and the reply it made); the second found both.
    assert stats.hits == 2 and stats.queried == 1 + 2


def test_a_request_that_caches_no_output_seals_only_its_prompt(model: Llama) -> None:
    # What a speech request asks: no prompt ever repeats its audio, so its output's blocks come back to the
    # pool unsealed (free in runs for the next table) rather than crowding the cache.
    engine = Engine(model, EngineConfig(max_batch=2, max_seq_len=256, seed=1, block_size=16))
    try:
        async def turn(prompt: list[int], cache_output: bool) -> list[int]:
            stream = engine.generate(prompt, SamplingParams(temperature=0.6, max_tokens=40), cache_output=cache_output)
            return [t async for t in stream]

        prompt = VOICE + TEXT_A + END  # 26 tokens: one whole block
        said = asyncio.run(turn(prompt, cache_output=False))
        cached_after_speech = engine.stats().kv_cache.cached  # type: ignore[union-attr]
        asyncio.run(turn(prompt + said + TEXT_B + END, cache_output=True))
        stats = engine.stats().kv_cache
    finally:
        engine.shutdown()
    assert stats is not None
    assert cached_after_speech == 1  # its prompt's block; 66 positions written, four whole blocks
    assert stats.hits == 1  # the next prompt, which holds the whole first request, found its prompt only
