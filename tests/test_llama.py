"""The compact Llama matches transformers' LlamaForCausalLM on the demo model."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from lyre.demo_model import DemoPaths
from lyre.engine.kv_cache import KVCache
from lyre.engine.llama import Llama
from lyre.engine.loader import load_llama

ATOL = 1e-4
PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 13, 128009, 128260, 128261, 128257]


@pytest.fixture(scope="module")
def models(demo: DemoPaths) -> tuple[Llama, LlamaForCausalLM]:
    ours = load_llama(demo.model, max_seq_len=64, device="cpu", dtype="float32")
    theirs = LlamaForCausalLM.from_pretrained(demo.model, dtype=torch.float32).eval()
    return ours, theirs


def _cache(model: Llama, slots: int = 2) -> KVCache:
    return KVCache(model.config, slots, 64, torch.float32, torch.device("cpu"))


@torch.inference_mode()
def test_prefill_logits_match(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    tokens = torch.tensor([PROMPT])
    positions = torch.arange(len(PROMPT))[None]
    hidden = ours(tokens, positions, torch.tensor([0]), _cache(ours))
    got = ours.logits(hidden[0])
    want = theirs(tokens).logits[0].float()
    assert got.shape == want.shape == (len(PROMPT), 156940)
    torch.testing.assert_close(got, want, atol=ATOL, rtol=0)


@torch.inference_mode()
def test_cached_decode_logits_match(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    cache = _cache(ours)
    slot = torch.tensor([1])  # not slot 0: the slot index must not matter
    ours(torch.tensor([PROMPT]), torch.arange(len(PROMPT))[None], slot, cache)
    out = theirs(torch.tensor([PROMPT]), use_cache=True)
    past = out.cache
    for step, token in enumerate([130000, 135000, 140000, 145000, 150000]):
        pos = len(PROMPT) + step
        got = ours.logits(ours(torch.tensor([[token]]), torch.tensor([[pos]]), slot, cache)[:, 0])
        out = theirs(torch.tensor([[token]]), cache=past, use_cache=True)
        past = out.cache
        torch.testing.assert_close(got, out.logits[:, -1].float(), atol=ATOL, rtol=0)


@torch.inference_mode()
def test_batched_decode_of_different_lengths_matches_each_alone(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, theirs = models
    cache = _cache(ours)
    short, long = PROMPT[:6], PROMPT
    ours(torch.tensor([short]), torch.arange(6)[None], torch.tensor([0]), cache)
    ours(torch.tensor([long]), torch.arange(len(long))[None], torch.tensor([1]), cache)
    nxt = torch.tensor([[131000], [132000]])
    positions = torch.tensor([[6], [len(long)]])
    got = ours.logits(ours(nxt, positions, torch.tensor([0, 1]), cache)[:, 0])
    for row, prompt in enumerate((short, long)):
        want = theirs(torch.tensor([prompt + [int(nxt[row, 0])]])).logits[0, -1].float()
        torch.testing.assert_close(got[row], want, atol=ATOL, rtol=0)


def test_logits_on_a_slice_equal_the_full_projection(models: tuple[Llama, LlamaForCausalLM]) -> None:
    ours, _ = models
    hidden = torch.randn(3, ours.config.hidden_size)
    full = ours.logits(hidden)
    torch.testing.assert_close(ours.logits(hidden, 128266, 132362), full[:, 128266:132362])
