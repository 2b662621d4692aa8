"""The compact Llama matches transformers' LlamaForCausalLM on the demo model, through every attention path."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from lyre.models.demo import DemoPaths
from lyre.engine.attention import FlexBlocks, FreshPrefill
from lyre.engine.cpu_decode import BlockOwners
from lyre.engine.kv_cache import KVCache
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from llama_calls import cache_for, decode, prefill, tables, where

ATOL = 1e-4
SEQ = 128
PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 13, 128009, 128260, 128261, 128257]
IN_PLACE = ("sdpa", "blocks", "runs", "spans")  # flex compiles for ~20 s on a CPU: its own test below


@pytest.fixture(scope="module")
def models(demo: DemoPaths) -> tuple[Llama, LlamaForCausalLM]:
    ours = load_llama(demo.model, max_seq_len=SEQ, device="cpu", dtype="float32")
    theirs = LlamaForCausalLM.from_pretrained(demo.model, dtype=torch.float32).eval()
    return ours, theirs


def _cache(model: Llama, slots: int = 4) -> KVCache:
    return cache_for(model, slots, SEQ)


@torch.inference_mode()
def test_prefill_logits_match(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    got = ours.logits(prefill(ours, _cache(ours), [PROMPT], [0])[0])
    want = theirs(torch.tensor([PROMPT])).logits[0].float()
    assert got.shape == want.shape == (len(PROMPT), 156940)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@torch.inference_mode()
def test_a_right_padded_prefill_matches_each_prompt_alone(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    short = PROMPT[:5]
    hidden = prefill(ours, _cache(ours), [short, PROMPT], [2, 0])
    want = theirs(torch.tensor([short])).logits[0].float()
    torch.testing.assert_close(ours.logits(hidden[0, : len(short)]), want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", IN_PLACE)
@torch.inference_mode()
def test_cached_decode_logits_match(models: tuple[Llama, LlamaForCausalLM], backend: str) -> None:
    ours, theirs = models
    cache = _cache(ours)
    prefill(ours, cache, [PROMPT], [1])  # not slot 0: the slot index must not matter
    out = theirs(torch.tensor([PROMPT]), use_cache=True)
    past = out.cache
    for step, token in enumerate([130000, 135000, 140000, 145000, 150000]):
        got = decode(ours, cache, backend, [token], [len(PROMPT) + step], [1])
        out = theirs(torch.tensor([[token]]), cache=past, use_cache=True)
        past = out.cache
        torch.testing.assert_close(got, out.logits[:, -1].float(), atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", IN_PLACE)
@torch.inference_mode()
def test_a_batch_of_very_different_lengths_matches_each_alone(models: tuple[Llama, LlamaForCausalLM],
                                                              backend: str) -> None:
    ours, theirs = models
    cache = _cache(ours)
    long = (PROMPT * 10)[:100]
    prompts = {3: PROMPT[:2], 0: long, 2: PROMPT}  # slot -> prompt; slot 1 stays free (stale keys there)
    for slot, prompt in prompts.items():
        prefill(ours, cache, [prompt], [slot])
    slots = list(prompts)
    nxt = [131000, 132000, 133000]
    got = decode(ours, cache, backend, nxt, [len(prompts[s]) for s in slots], slots)
    for row, slot in enumerate(slots):
        want = theirs(torch.tensor([prompts[slot] + [nxt[row]]])).logits[0, -1].float()
        torch.testing.assert_close(got[row], want, atol=ATOL, rtol=0)


@pytest.mark.parametrize("backend", IN_PLACE)
@torch.inference_mode()
def test_rows_that_share_a_prefix_block_each_read_it(models: tuple[Llama, LlamaForCausalLM], backend: str) -> None:
    ours, theirs = models
    cache = _cache(ours)
    prefix = (PROMPT * 2)[:16]  # one whole block, written once (rows of slot 0's table)
    prefill(ours, cache, [prefix + PROMPT[:5]], [0])
    own = tables(cache, 4)
    shared = torch.stack([own[0], torch.cat((own[0][:1], own[2][1:]))])  # row 1: slot 0's first block, then slot 2's
    rows = [prefix + PROMPT[:5], prefix + PROMPT[5:9]]
    positions = torch.arange(len(rows[1]))[None]
    ours(torch.tensor([rows[1]]), positions, FreshPrefill(cache, where(cache, shared[1:], positions)))
    nxt = [131000, 132000]
    owners = BlockOwners.of(shared, torch.tensor([len(r) + 1 for r in rows]), cache.block_size)
    assert owners.extra is not None and owners.extra[1].tolist() == [int(own[0][0])]  # the shared block, twice read
    got = decode(ours, cache, backend, nxt, [len(r) for r in rows], [0, 2], table=shared)
    for row, prompt in enumerate(rows):
        want = theirs(torch.tensor([prompt + [nxt[row]]])).logits[0, -1].float()
        torch.testing.assert_close(got[row], want, atol=ATOL, rtol=0)


@pytest.mark.slow
@torch.inference_mode()
def test_flex_attention_reads_the_cache_in_place_and_matches(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    cache = cache_for(ours, 4, 2 * SEQ, block_size=128)
    blocks = FlexBlocks(4 + 1, cache)
    prompts = {2: PROMPT, 0: (PROMPT * 11)[:127]}  # the second ends one key short of a whole block
    for slot, prompt in prompts.items():
        prefill(ours, cache, [prompt], [slot])
    slots = list(prompts)
    got = decode(ours, cache, "flex", [131000, 132000], [len(prompts[s]) for s in slots], slots, blocks)
    assert blocks.full.view(-1).tolist()[:3] == [1, 0, 0] and blocks.partial.view(-1).tolist()[:3] == [0, 0, 1]
    # slot 0 read its own last block (blocks run backwards from the end of each slot's share)
    assert blocks.full_index[0, 0, 0, 0].item() == 1 and blocks.partial_index[2, 0, 0, 0].item() == 5
    for row, slot in enumerate(slots):
        want = theirs(torch.tensor([prompts[slot] + [[131000, 132000][row]]])).logits[0, -1].float()
        torch.testing.assert_close(got[row], want, atol=ATOL, rtol=0)


def test_logits_on_a_slice_equal_the_full_projection(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, _ = models
    hidden = torch.randn(3, ours.config.hidden_size)
    full = ours.logits(hidden)
    torch.testing.assert_close(ours.logits(hidden, 128266, 132362), full[:, 128266:132362])
