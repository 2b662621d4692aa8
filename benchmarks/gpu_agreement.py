"""Whether a decode lever draws the tokens of its reference: the GPU run's correctness check.

benchmarks/gpu.py pairs every other lever set with one reference: sdpa's
plain eager decoding in bf16. Free-running draws cannot decide it: in bf16 on
a GPU, kernels of other shapes (a padded batch, keys read to ``max_seq_len``,
blocks read in place) round differently, a near tie then parts one draw, and
every later draw follows a different history. So the lever is teacher-forced
on its reference's draws (fed the reference's ids and penalty history), and
judged on what it wrote to the KV cache (every layer's keys and values) and
on its greedy draws, step by step.

Used by benchmarks/gpu.py; `token_agreement` returns plain figures for its JSON.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from gpu_levers import PROMPTS, Lever, free_memory, model_for, runner_for
from lyre import orpheus
from lyre.engine import SamplingParams
from lyre.engine.by_hand import ByHand
from lyre.engine.kv_cache import KVCache
from lyre.models.llama import Llama
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

__all__ = ["AGREE_SHARE", "KV_TOLERANCE", "token_agreement"]

# A lever agrees with its reference when, teacher-forced on the reference's tokens (`token_agreement`), what it
# wrote to the KV cache is within KV_TOLERANCE of the reference's (relative error of each position's keys and
# values over every layer) and at least AGREE_SHARE of its greedy draws match. Measured on this CPU with the demo
# model: the fixed-shape path and in-place attention 6e-7 in float32, 0 in bf16; FP8 weights (an error far past
# bf16 rounding between kernels of other shapes) 0.09 and 80% of draws; a stale input buffer, positions off by
# one, or padding rows writing a live slot 1.1-1.35. Sampled draws cannot be compared: over a random model's
# near-flat distribution any rounding difference moves the draw (FP8 matched 3 in 123).
KV_TOLERANCE = 0.25
AGREE_SHARE = 0.5  # a wrong slice of the vocabulary matches none


def _generate(runner: ModelRunner, steps: int, forced: list[list[int]] | None = None,
              ) -> tuple[list[list[int]], list[Request]]:
    """Prefill PROMPTS into slots 2, 0, 5, decode ``steps`` more steps greedily -> each row's draws, and the rows.

    With ``forced`` (a reference run's draws) each row is teacher-forced: fed the
    reference's id instead of its own, and its repetition-penalty history made the
    reference's, so every step runs on the reference's history and a near tie costs
    one draw, not the rest of the row."""
    hand = ByHand(runner)
    reqs = []
    for i, (prompt, slot) in enumerate(zip(PROMPTS, (2, 0, 5))):
        params = SamplingParams(temperature=0.0, seed=i, max_tokens=steps + 1, stop_ids=(orpheus.STOP_TOKEN,))
        req = Request(f"g{i}", prompt, params, seed=i, constraint=AUDIO_CONSTRAINT)
        hand.place(req, slot)
        reqs.append(req)
    drawn: list[list[int]] = [[] for _ in reqs]
    for step in range(steps + 1):
        tokens = hand.prefill(reqs) if step == 0 else hand.decode(reqs)
        for row, (req, token) in enumerate(zip(reqs, tokens)):
            drawn[row].append(token)
            req.output_ids.append(token if forced is None else forced[row][step])
        if forced is not None:
            with torch.inference_mode():
                for req in reqs:  # what the reference's runner recorded: the prompt and its own draws
                    runner.seen[req.slot] = False
                    runner.seen[req.slot, torch.tensor(req.tokens, device=runner.device)] = True
    return drawn, reqs


def _positions(pool: torch.Tensor, req: Request, n: int) -> torch.Tensor:
    """``req``'s first ``n`` positions of ``pool`` (a cache's keys or values), read through its block table:
    (positions, layers * heads * head_dim)."""
    assert req.kv is not None
    blocks = torch.tensor(req.kv.blocks, device=pool.device)
    layers, heads, _, size, dim = pool.shape
    rows = pool[:, :, blocks].reshape(layers, heads, len(blocks) * size, dim)[:, :, :n]
    return rows.float().permute(2, 0, 1, 3).reshape(n, -1)


@torch.inference_mode()
def _kv_error(got: KVCache, want: KVCache, got_reqs: list[Request], want_reqs: list[Request]) -> float:
    """The largest relative error of one position's keys and values (all layers and heads) over the rows'
    written positions: the prompt and every fed token but the last. Each run's rows are read through their
    own block tables (the two runners hand out different blocks, of different sizes for flex)."""
    worst = 0.0
    for mine, theirs in zip(got_reqs, want_reqs):
        n = mine.num_tokens - 1
        for a, b in ((got.k, want.k), (got.v, want.v)):
            x, y = _positions(a, mine, n), _positions(b, theirs, n)
            worst = max(worst, float(((x - y).norm(dim=1) / y.norm(dim=1).clamp(min=1e-30)).max()))
    return worst


def token_agreement(base: Llama, pairs: list[tuple[Lever, Lever]], device: str, steps: int,
                    log: Callable[[str], None]) -> list[dict]:
    """For each (lever, reference): the lever teacher-forced on the reference's greedy draws; the largest
    relative KV error, the share of draws alike; ``agree`` within `KV_TOLERANCE` and `AGREE_SHARE`,
    ``equal`` when every draw matched."""
    out, models = [], {}  # type: ignore[var-annotated]
    for lever, reference in pairs:
        entry: dict = {"lever": lever.name, "reference": reference.name}
        try:
            want_runner = runner_for(model_for(base, reference.fp8, models), reference, 8, 512, device)
            want, want_reqs = _generate(want_runner, steps)
            got_runner = runner_for(model_for(base, lever.fp8, models), lever, 8, 512, device)
            got, got_reqs = _generate(got_runner, steps, forced=want)
            kv_error = _kv_error(got_runner.cache, want_runner.cache, got_reqs, want_reqs)
            same = sum(a == b for g, w in zip(got, want) for a, b in zip(g, w))
            total = sum(len(w) for w in want)
            entry |= {"agree": kv_error <= KV_TOLERANCE and same >= AGREE_SHARE * total, "equal": same == total,
                      "kv_error": kv_error, "same_tokens": same, "tokens": total}
            log(f"  {lever.name} vs {reference.name}: KV within {kv_error:.1e}, {same}/{total} teacher-forced "
                f"greedy draws alike, agree={entry['agree']}")
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
            log(f"  {lever.name} vs {reference.name} failed: {entry['error']}")
        finally:
            want_runner = got_runner = None  # free both caches (and graphs) before the next pair
            free_memory(device)
        out.append(entry)
    return out
