"""The engine on real trained weights: SmolLM2-135M-Instruct, the demo chat model (a Q4_1 GGUF file).

Random weights give an almost flat distribution; these give the peaked one a
real model has, so greedy answers can be checked for facts and the sampler's
small-nucleus shortcut really runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from forcing import assert_rows_match, forced_run, request
from llama_calls import cache_for, decode, prefill
from lyre.engine import Engine, EngineConfig, RequestStream, SamplingParams, sampler
from lyre.models.gguf import load_gguf_llama, open_gguf
from lyre.models.llama import Llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.engine.sampler import CANDIDATES, SamplingTensors, row_keys, sample
from lyre.llm import Chat, ChatFormat, ChatOptions, demo_gguf
from lyre.llm.chat_format import gguf_chat_format

pytestmark = pytest.mark.slow

QUESTIONS = ["What is the capital of France?", "What is the capital of Japan?", "What is the opposite of hot?",
             "What is the chemical symbol for water?"]
ATOL = 2e-3  # float32 through 30 layers, summed in another order than transformers sums


@pytest.fixture(scope="module")
def smol() -> tuple[Llama, ChatFormat]:
    reader = open_gguf(demo_gguf())
    return load_gguf_llama(reader, 512, "cpu", "float32"), gguf_chat_format(reader, "smollm2")


@pytest.fixture(scope="module")
def reference(smol: tuple[Llama, ChatFormat]) -> LlamaForCausalLM:
    """transformers' Llama holding the same dequantised weights."""
    ours = smol[0].config
    config = LlamaConfig(vocab_size=ours.vocab_size, hidden_size=ours.hidden_size,
                         intermediate_size=ours.intermediate_size, num_hidden_layers=ours.num_hidden_layers,
                         num_attention_heads=ours.num_attention_heads, num_key_value_heads=ours.num_key_value_heads,
                         head_dim=ours.head_dim, rope_theta=ours.rope_theta, rms_norm_eps=ours.rms_norm_eps,
                         tie_word_embeddings=True, max_position_embeddings=ours.max_position_embeddings)
    model = LlamaForCausalLM(config).eval()
    missing, unexpected = model.load_state_dict(smol[0].state_dict(), strict=False)
    assert missing == ["lm_head.weight"] and not unexpected  # tied to the embedding
    return model


@pytest.fixture(scope="module")
def chat(smol: tuple[Llama, ChatFormat]) -> Iterator[Chat]:
    model, chat_format = smol
    chat = Chat(Engine(model, EngineConfig(max_batch=4, max_seq_len=512)), chat_format)
    yield chat
    chat.close()


async def _collect(stream: RequestStream) -> list[int]:
    return [token async for token in stream]


def _prompt(chat_format: ChatFormat, question: str) -> list[int]:
    return chat_format.prompt_ids([{"role": "user", "content": question}])


@torch.inference_mode()
def test_prefill_and_cached_decode_logits_match_transformers(smol: tuple[Llama, ChatFormat],
                                                             reference: LlamaForCausalLM) -> None:
    model, chat_format = smol
    prompt = _prompt(chat_format, QUESTIONS[0])
    cache = cache_for(model, 2, 512)
    # Slot 1, not 0: the slot must not matter.
    got = [model.logits(prefill(model, cache, [prompt], [1])[0])]
    tokens = list(prompt)
    for _ in range(4):  # one token at a time through the cache, reading it in place
        tokens.append(int(got[-1][-1].argmax()))
        got.append(decode(model, cache, "sdpa", tokens[-1:], [len(tokens) - 1], [1]))
    want = reference(torch.tensor([tokens])).logits[0]  # one full forward over prompt and answer
    torch.testing.assert_close(torch.cat(got), want[: len(tokens)], atol=ATOL, rtol=0)
    assert chat_format.tokenizer.decode(tokens[len(prompt):]).startswith("The capital")


def test_greedy_decoding_matches_transformers_generate(chat: Chat, reference: LlamaForCausalLM) -> None:
    prompts = [_prompt(chat.format, q) for q in QUESTIONS[:3]]
    greedy = SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=12)

    async def ours() -> list[list[int]]:  # batched together on the engine
        return list(await asyncio.gather(*(_collect(chat.engine.generate(p, greedy)) for p in prompts)))

    for prompt, tokens in zip(prompts, asyncio.run(ours())):
        assert len(tokens) == 12
        # Teacher-forced on our answer: each greedy pick is transformers' argmax there, or ties it within float
        # error (a near tie may fall either way on another CPU, and then the two answers part).
        with torch.inference_mode():
            logits = reference(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]  # (12, V)
        picked = logits.gather(1, torch.tensor(tokens)[:, None])[:, 0]
        assert (logits.max(dim=-1).values - picked).max() <= ATOL, tokens


@pytest.mark.parametrize(("question", "word"), list(zip(QUESTIONS, ["Paris", "Tokyo", "cold", "H2O"])))
def test_a_greedy_answer_holds_the_fact(chat: Chat, question: str, word: str) -> None:
    async def answer() -> str:
        stream = chat.stream([{"role": "user", "content": question}], ChatOptions(max_tokens=24, temperature=0))
        return await stream.text()

    assert word in asyncio.run(answer())


def test_sampling_on_the_real_distribution_takes_the_small_nucleus_path(smol: tuple[Llama, ChatFormat],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    model, chat_format = smol
    prompt = _prompt(chat_format, "Tell me a story.")
    with torch.inference_mode():
        last = model.logits(prefill(model, cache_for(model, 1, 512), [prompt], [0])[0, -1:])
    n = 256
    logits = last.expand(n, -1).clone()
    seen = torch.zeros_like(logits, dtype=torch.bool)
    params = SamplingTensors(temperature=torch.full((n,), 1.0), top_p=torch.full((n,), 0.95),
                             top_k=torch.zeros(n, dtype=torch.long), repetition_penalty=torch.ones(n),
                             keys=row_keys(torch.full((n,), 11, dtype=torch.long), torch.arange(n)))
    widths: list[int] = []
    candidates = sampler._candidates

    def spy(*args: object) -> tuple[torch.Tensor, torch.Tensor]:
        ordered, order = candidates(*args)  # type: ignore[arg-type]
        widths.append(ordered.shape[-1])
        return ordered, order

    monkeypatch.setattr(sampler, "_candidates", spy)
    shortcut = sample(logits, seen, params)
    monkeypatch.setattr(sampler, "CANDIDATES", model.config.vocab_size)  # too wide to help: the full sort
    full = sample(logits, seen, params)
    assert widths == [CANDIDATES, model.config.vocab_size]  # which path each draw took
    assert torch.equal(shortcut, full)
    assert len(set(full.tolist())) > 10  # a real nucleus, not one token


def test_a_batch_of_prompts_gives_each_the_logits_it_gets_alone(smol: tuple[Llama, ChatFormat]) -> None:
    model, chat_format = smol
    runner = ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=512))
    prompts = [_prompt(chat_format, q) for q in ["Tell me a story.", "Write a poem about the sea.", QUESTIONS[0]]]

    def reqs() -> list[Request]:
        return [request(p, 100 + i, SamplingParams(temperature=0.8, top_p=0.95, repetition_penalty=1.0,
                                                   max_tokens=12), i) for i, p in enumerate(prompts)]

    alone = [forced_run(runner, [req], 12)[0] for req in reqs()]
    together = forced_run(runner, reqs(), 12, feed=[a.fed for a in alone])
    assert_rows_match(together, alone, atol=ATOL)  # a real model's peaked logits, three prompt lengths
    assert [t.drawn[:4] for t in together] == [a.drawn[:4] for a in alone]
    assert len({tuple(a.drawn) for a in alone}) == len(prompts)


def test_a_batch_of_prompts_runs_on_the_chat_engine(chat: Chat) -> None:
    prompts = [_prompt(chat.format, q) for q in ["Tell me a story.", "Write a poem about the sea.", QUESTIONS[0]]]

    def params(i: int) -> SamplingParams:
        return SamplingParams(temperature=0.8, top_p=0.95, repetition_penalty=1.0, max_tokens=12, seed=100 + i)

    async def run() -> tuple[list[list[int]], list[list[int]]]:
        alone = [await _collect(chat.engine.generate(p, params(i))) for i, p in enumerate(prompts)]
        together = await asyncio.gather(*(_collect(chat.engine.generate(p, params(i))) for i, p in enumerate(prompts)))
        return alone, list(together)

    alone, together = asyncio.run(run())
    assert [len(t) for t in together] == [len(t) for t in alone] == [12] * len(prompts)
    assert [t[:4] for t in together] == [t[:4] for t in alone]  # later draws may part on float error alone
