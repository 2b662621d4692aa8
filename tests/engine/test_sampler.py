"""Sampling arithmetic: penalties, truncation, and the counter-based noise."""

from __future__ import annotations

import pytest
import torch

from lyre.engine import sampler
from lyre.engine.sampler import CANDIDATES, SamplingTensors, row_keys, sample


def _params(n: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0, penalty: float = 1.0,
            seed: int = 0) -> SamplingTensors:
    return SamplingTensors(
        temperature=torch.full((n,), temperature),
        top_p=torch.full((n,), top_p),
        top_k=torch.full((n,), top_k, dtype=torch.long),
        repetition_penalty=torch.full((n,), penalty),
        keys=row_keys(torch.full((n,), seed, dtype=torch.long), torch.arange(n)),
    )


LOGITS = torch.tensor([2.0, 1.0, 0.5, 0.0, -0.5, -1.0, -2.0, -3.0])


def _draw(n: int, **kwargs: float) -> torch.Tensor:
    logits = LOGITS.expand(n, -1).clone()
    seen = torch.zeros(n, len(LOGITS), dtype=torch.bool)
    return sample(logits, seen, _params(n, **kwargs))


def test_draws_follow_the_softmax_distribution() -> None:
    n = 40_000
    counts = torch.bincount(_draw(n, temperature=0.7), minlength=8).float() / n
    expected = torch.softmax(LOGITS / 0.7, dim=0)
    assert torch.allclose(counts, expected, atol=0.01), (counts, expected)


def test_top_p_keeps_the_smallest_prefix_reaching_p() -> None:
    probs = torch.softmax(LOGITS, dim=0)  # 0.53, 0.20, 0.12, ...
    drawn = set(_draw(5000, top_p=float(probs[0] + probs[1]) - 0.01).tolist())
    assert drawn == {0, 1}


def test_top_k_and_tiny_top_p_and_zero_temperature_pick_the_argmax() -> None:
    for kwargs in ({"top_k": 1}, {"top_p": 1e-6}, {"temperature": 0.0}):
        assert set(_draw(500, **kwargs).tolist()) == {0}, kwargs
    assert set(_draw(5000, top_k=3).tolist()) == {0, 1, 2}


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits() -> None:
    logits = torch.tensor([[2.0, 1.9, -0.1, -0.2]])
    seen = torch.tensor([[True, False, True, False]])
    greedy = _params(1, temperature=0.0, penalty=1.3)
    assert sample(logits, seen, greedy).item() == 1  # 2.0 / 1.3 < 1.9
    negative = torch.tensor([[-0.1, -0.12]])
    seen = torch.tensor([[True, False]])
    assert sample(negative, seen, greedy).item() == 1  # -0.1 * 1.3 < -0.12


def test_a_row_draws_the_same_alone_or_in_a_batch() -> None:
    batch = _draw(64, temperature=1.0)
    for row in (0, 17, 63):
        params = _params(64, temperature=1.0)
        alone = SamplingTensors(
            temperature=params.temperature[row : row + 1],
            top_p=params.top_p[row : row + 1],
            top_k=params.top_k[row : row + 1],
            repetition_penalty=params.repetition_penalty[row : row + 1],
            keys=params.keys[row : row + 1],
        )
        got = sample(LOGITS[None].clone(), torch.zeros(1, 8, dtype=torch.bool), alone)
        assert got.item() == batch[row].item()


def test_keys_differ_by_seed_and_by_step() -> None:
    keys = row_keys(torch.tensor([0, 0, 1, 2**40]), torch.tensor([0, 1, 0, 0]))
    assert len(set(keys.tolist())) == 4


def test_the_candidate_shortcut_draws_exactly_what_a_full_sort_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    width = 4 * CANDIDATES
    peaked = torch.full((width,), -20.0)  # nucleus inside the top CANDIDATES: the shortcut applies
    peaked[:50] = torch.linspace(3.0, 0.0, 50)
    peaked[50:60] = 1.0  # ties: ordered by column on both paths
    peaked = peaked[torch.randperm(width, generator=torch.Generator().manual_seed(0))]
    n = 2000
    logits = peaked.expand(n, -1).clone()
    seen = torch.zeros(n, width, dtype=torch.bool)
    shortcut = sample(logits, seen, _params(n, top_p=0.8))
    monkeypatch.setattr(sampler, "CANDIDATES", width)  # too wide to help: always the full sort
    full = sample(logits, seen, _params(n, top_p=0.8))
    assert torch.equal(shortcut, full)
    assert len(set(full.tolist())) > 10
