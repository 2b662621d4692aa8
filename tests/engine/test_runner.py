"""The model runner: the fixed-shape decode path (buckets, padding, slices of a family) against eager decoding."""

from __future__ import annotations

import pytest
import torch

from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import EngineConfig, SamplingParams
from lyre.common.batching import bucket_for
from lyre.engine.graphs import batch_buckets, warm_up
from lyre.models.llama import Llama
from lyre.models.loader import load_llama
from lyre.engine.by_hand import ByHand
from lyre.engine.runner import ModelRunner
from lyre.engine.sequence import Request
from lyre.tts import AUDIO_CONSTRAINT

PROMPTS = [
    [128259, 128000, 83, 5169, 25, 22691, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 273, 64, 25, 3923, 264, 6555, 1938, 369, 264, 4321, 13, 128009, 128260, 128261, 128257],
    [128259, 128000, 40, 1093, 13, 128009, 128260, 128261, 128257],
]


def test_buckets_pad_by_at_most_fifteen_rows() -> None:
    assert batch_buckets(1) == (1,)
    assert batch_buckets(8) == (1, 2, 4, 8)
    assert batch_buckets(40) == (1, 2, 4, 8, 16, 32, 40)
    buckets = batch_buckets(256)
    assert buckets[-1] == 256 and all(b - a <= 16 for a, b in zip(buckets, buckets[1:]))
    assert [bucket_for(n, buckets) for n in (1, 3, 5, 9, 17, 255)] == [1, 4, 8, 16, 32, 256]
    assert bucket_for(257, buckets) is None
    with pytest.raises(ValueError, match="at least 1 row"):
        bucket_for(0, buckets)
    with pytest.raises(ValueError):
        batch_buckets(0)


@pytest.fixture(scope="module")
def model(demo: DemoPaths) -> Llama:
    return load_llama(demo.model, max_seq_len=256, device="cpu", dtype="float32")


def _run(runner: ModelRunner, steps: int, constrained: bool = True, temperature: float = 0.6,
         prompts: list[list[int]] = PROMPTS, slots: tuple[int, ...] = (4, 0, 2)) -> list[list[int]]:
    """Prefill ``prompts`` into ``slots``, then decode them together for ``steps`` steps."""
    reqs = []
    for i, prompt in enumerate(prompts):
        sampling = SamplingParams(seed=i, max_tokens=steps + 1, stop_ids=(orpheus.STOP_TOKEN,),
                                  temperature=temperature)
        req = Request(f"r{i}", prompt, sampling, seed=i, constraint=AUDIO_CONSTRAINT if constrained else None)
        reqs.append(req)
    hand = ByHand(runner)
    for req, slot in zip(reqs, slots):
        hand.place(req, slot)
    for req, token in zip(reqs, hand.prefill(reqs)):
        req.output_ids.append(token)
    for _ in range(steps):
        for req, token in zip(reqs, hand.decode(reqs)):
            req.output_ids.append(token)
    return [r.output_ids for r in reqs]


def test_fixed_shape_decode_with_padding_draws_the_eager_tokens(model: Llama) -> None:
    config = EngineConfig(max_batch=8, max_seq_len=256)
    eager = _run(ModelRunner(model, config, AUDIO_CONSTRAINT.family), steps=30)
    fixed_runner = ModelRunner(model, config, AUDIO_CONSTRAINT.family, fixed_shape=True)
    assert bucket_for(3, fixed_runner.buckets) == 4  # one padding row every step
    fixed = _run(fixed_runner, steps=30)
    assert fixed == eager
    for tokens in eager:  # every token in its frame position's band: the slices were cut right
        assert all(t in AUDIO_CONSTRAINT.allowed(n) for n, t in enumerate(tokens))
    # The padding rows wrote only the spare slot: the live slots' state is what eager decoding left.
    assert fixed_runner.drawn[[4, 0, 2]].tolist() == [31, 31, 31]


def test_fixed_shape_decode_of_unconstrained_rows_samples_the_whole_vocabulary(model: Llama) -> None:
    # Greedy: the fixed path attends over every key (masked) where eager stops at the longest row, so
    # logits agree to ~1e-6, not bit for bit; a random model's near-flat 157k-way draw can tell that apart.
    config = EngineConfig(max_batch=8, max_seq_len=256)
    eager = _run(ModelRunner(model, config), steps=6, constrained=False, temperature=0.0)
    assert _run(ModelRunner(model, config, fixed_shape=True), steps=6, constrained=False, temperature=0.0) == eager


def _long_rows(runner: ModelRunner, steps: int) -> list[list[int]]:
    """Three rows of 128 keys, greedy: prefilled, then ``steps`` decode steps."""
    return _run(runner, steps, temperature=0.0, prompts=[p[:1] * 127 for p in PROMPTS], slots=(0, 1, 2))


def test_a_fixed_shape_step_reads_its_context_bucket_whatever_max_seq_len(demo: DemoPaths) -> None:
    """At 128 keys a row the fixed-shape step copies the same K/V with --max-seq-len 2,048 or 8,192 (its context
    bucket, 256 keys), not every block a table can hold: what a CUDA graph of the step would copy on every replay
    (benchmarks/engine.py times it). And the bucketed step draws the eager step's tokens."""
    read: dict[int, list[int]] = {}
    for max_seq_len in (2048, 8192):
        long_model = load_llama(demo.model, max_seq_len=max_seq_len, device="cpu", dtype="float32")
        config = EngineConfig(max_batch=4, max_seq_len=max_seq_len)
        runner = ModelRunner(long_model, config, AUDIO_CONSTRAINT.family, fixed_shape=True)
        assert runner.contexts == tuple(4 * 2**i for i in range(runner.contexts.index(runner.max_blocks) + 1))
        seen = read.setdefault(max_seq_len, [])
        gather = runner.cache.gather

        def spy(layer: int, tables: torch.Tensor, seen: list[int] = seen,
                real=gather) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[no-untyped-def]
            seen.append(tables.shape[1] * runner.cache.block_size)
            return real(layer, tables)

        runner.cache.gather = spy  # type: ignore[method-assign]
        fixed = _long_rows(runner, steps=3)
        assert fixed == _long_rows(ModelRunner(long_model, config, AUDIO_CONSTRAINT.family), steps=3)
    # Every layer of every decode step read 256 keys a row, against 2,048 and 8,192 for the whole table (the
    # prompts' prefill gathers nothing).
    assert set(read[2048]) == set(read[8192]) == {256} and len(read[2048]) == len(read[8192]) == 3 * 4


def test_rows_outside_the_family_fall_back_to_the_eager_path(model: Llama) -> None:
    config = EngineConfig(max_batch=8, max_seq_len=256)
    runner = ModelRunner(model, config, AUDIO_CONSTRAINT.family, fixed_shape=True)
    # Unconstrained rows are not of the audio family: the step runs eagerly and still samples right.
    assert _run(runner, steps=4, constrained=False) == _run(ModelRunner(model, config), steps=4, constrained=False)


def test_the_loader_hands_out_weights_that_record_no_autograd(model: Llama) -> None:
    # load_state_dict(assign=True) keeps the meta-built parameters' requires_grad=True unless told otherwise.
    assert not any(p.requires_grad for p in model.parameters())


def test_warming_up_the_fixed_shape_path_leaves_no_autograd_state(demo: DemoPaths) -> None:
    """What DecodeGraphs runs before each capture, called as it is (outside any inference mode), on weights
    that require grad (as a model built in place has them): the cache must not become part of an autograd
    graph, which would keep every warm-up pass's activations alive through it."""
    model = load_llama(demo.model, max_seq_len=128, device="cpu", dtype="float32").requires_grad_(True)
    runner = ModelRunner(model, EngineConfig(max_batch=4, max_seq_len=128), AUDIO_CONSTRAINT.family, fixed_shape=True)
    assert not torch.is_inference_mode_enabled() and torch.is_grad_enabled()
    warm_up(runner._decode_fixed, runner.shapes)
    _run(runner, steps=3)
    state = {"cache.k": runner.cache.k, "cache.v": runner.cache.v, "seen": runner.seen, "drawn": runner.drawn,
             "out": runner._out, "rows": runner._rows, "slot_lengths": runner._slot_lengths}
    for name, tensor in state.items():
        assert tensor.grad_fn is None and not tensor.requires_grad, name
    for name, param in model.named_parameters():
        assert param.grad is None and param.grad_fn is None, name


def test_the_step_reports_its_forward_time(model: Llama) -> None:
    runner = ModelRunner(model, EngineConfig(max_batch=8, max_seq_len=256), AUDIO_CONSTRAINT.family)
    _run(runner, steps=3)
    assert runner.forward_seconds > 0


@torch.inference_mode()
def test_the_family_places_every_audio_slice() -> None:
    family = AUDIO_CONSTRAINT.family
    assert family is not None
    assert (family.lo, family.hi, family.width, family.extras) == (
        orpheus.AUDIO_TOKEN_BASE, orpheus.AUDIO_TOKEN_BASE + 7 * 4096, 4096, (orpheus.STOP_TOKEN,))
    assert family.place(AUDIO_CONSTRAINT.allowed(0)) == (0, (False,))
    assert family.place(AUDIO_CONSTRAINT.allowed(7)) == (0, (True,))
    assert family.place(AUDIO_CONSTRAINT.allowed(3)) == (3 * 4096, (False,))
