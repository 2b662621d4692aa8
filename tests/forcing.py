"""Batched against alone, teacher-forced: the logits a `ModelRunner` samples from, row by row.

"A batch gives each row what it gets alone" holds for logits within float
error, not for sampled tokens: another CPU (or any GPU) sums a batched matmul
in another order, a logit moves in its last bits, and sooner or later one draw
lands on the other side of a nucleus boundary. After that the two runs feed
different tokens and nothing more can be compared. So the check feeds both
runs the same tokens (teacher forcing) and compares the logits every step,
through the runner's real paths (prefill, decode, adapter grouping, the
fixed-shape step), by recording what the runner hands to `sample`.

    alone = [forced_run(runner, [req()])[0] for req in ...]
    together = forced_run(runner, [req() for ...], feed=[a.tokens for a in alone])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from lyre import orpheus
from lyre.engine import runner as runner_module
from lyre.engine.by_hand import ByHand
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request

__all__ = ["FEED", "Forced", "assert_rows_match", "forced_run", "gap", "request", "sampled_logits"]

FEED = [orpheus.AUDIO_TOKEN_BASE + 4096 * (i % 7) + 17 * i for i in range(12)]  # tokens fed to decode steps


@dataclass
class Forced:
    """One row of a forced run: the logits each step sampled from (steps, columns), and the ids it drew."""

    logits: torch.Tensor
    drawn: list[int]
    fed: list[int]  # what was appended after each step: the ids fed back, or ``drawn`` when nothing was forced


def request(prompt: list[int], seed: int, sampling: Any, slot: int, adapter_slot: int | None = None,
            constraint: Any = None) -> Request:
    """A request for row ``slot`` (and LoRA slot ``adapter_slot``), as the engine would place it; `forced_run`
    gives it its blocks."""
    req = Request(f"r{slot}", list(prompt), sampling, seed=seed, constraint=constraint)
    req.slot, req.adapter_slot = slot, adapter_slot
    return req


def forced_run(runner: ModelRunner, reqs: list[Request], steps: int,
               feed: list[list[int]] | None = None) -> list[Forced]:
    """Prefill ``reqs`` in one step, then decode them together for ``steps - 1`` more.

    After each step row i is fed ``feed[i][step]`` (its own draw when ``feed``
    is None). Every row keeps the same output length, so a step samples all
    rows in one call; anything else fails the run rather than mislabel rows.
    """
    n = len(reqs)
    calls: list[torch.Tensor] = []
    real_sample: Callable[..., torch.Tensor] = runner_module.sample

    def spy(logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(logits[:n].float().clone())
        return real_sample(logits, *args, **kwargs)

    per_step: list[torch.Tensor] = []
    drawn: list[list[int]] = [[] for _ in reqs]
    fed: list[list[int]] = [[] for _ in reqs]
    hand = ByHand(runner)
    for req in reqs:
        assert req.slot is not None
        hand.place(req, req.slot)
    runner_module.sample = spy  # type: ignore[assignment]
    try:
        for step in range(steps):
            calls.clear()
            ids = hand.prefill(reqs) if step == 0 else hand.decode(reqs)
            assert len(calls) == 1 and calls[0].shape[0] == n, "rows of a step must share one sampling call"
            per_step.append(calls[0])
            for i, (req, token) in enumerate(zip(reqs, ids)):
                given = token if feed is None else feed[i][step]
                drawn[i].append(token)
                fed[i].append(given)
                req.output_ids.append(given)
    finally:
        runner_module.sample = real_sample  # type: ignore[assignment]
    # A slice with an extra id (a stop token at a frame boundary) is one column wider: pad the narrower
    # steps with -inf, which is also how the fixed-shape step masks an extra a row may not use.
    width = max(step.shape[-1] for step in per_step)
    padded = [torch.nn.functional.pad(step, (0, width - step.shape[-1]), value=float("-inf")) for step in per_step]
    logits = torch.stack(padded, dim=1)  # (rows, steps, columns)
    return [Forced(logits[i], drawn[i], fed[i]) for i in range(n)]


def assert_rows_match(together: list[Forced], alone: list[Forced], atol: float) -> float:
    """Each row's logits batched equal its logits alone within ``atol``, where both are finite; the largest gap."""
    worst = 0.0
    for i, (t, a) in enumerate(zip(together, alone)):
        assert t.fed == a.fed, f"row {i}: both runs must be fed the same tokens"
        assert torch.equal(torch.isfinite(a.logits), torch.isfinite(t.logits)), \
            f"row {i}: different tokens allowed batched and alone"
        row_gap = gap(t.logits, a.logits)
        assert row_gap <= atol, f"row {i}: batched logits differ from alone by {row_gap:.2e} (tolerance {atol:.0e})"
        worst = max(worst, row_gap)
    return worst


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """The largest difference between two logits tensors over the columns both allow (finite in both)."""
    finite = torch.isfinite(a) & torch.isfinite(b)
    return float((a[finite] - b[finite]).abs().max())


@contextmanager
def sampled_logits() -> Iterator[list[torch.Tensor]]:
    """Every logits tensor the runner hands to `sample`, in order."""
    calls: list[torch.Tensor] = []
    real: Callable[..., torch.Tensor] = runner_module.sample

    def spy(logits: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(logits.float().clone())
        return real(logits, *args, **kwargs)

    runner_module.sample = spy  # type: ignore[assignment]
    try:
        yield calls
    finally:
        runner_module.sample = real  # type: ignore[assignment]
