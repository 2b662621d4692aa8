"""FP8 weights: e4m3 projections with per-channel scales stay close to the full-precision model."""

from __future__ import annotations

import asyncio

import pytest
import torch
from torch import nn

from lyre import orpheus
from lyre.models.demo import DemoPaths
from lyre.engine import Engine, EngineConfig, SamplingParams
from lyre.engine.attention import FreshPrefill
from lyre.models.fp8 import FP8_PROJECTIONS, Fp8Linear, quantize_fp8
from lyre.models.loader import load_llama
from lyre.tts import AUDIO_CONSTRAINT
from llama_calls import cache_for

PROMPT = [128259, 128000, 83, 5169, 25, 22691, 1070, 13, 128009, 128260, 128261, 128257]


def test_an_fp8_layer_is_within_a_few_percent_of_the_float_layer() -> None:
    torch.manual_seed(0)
    linear = nn.Linear(256, 512, bias=False)
    x = torch.randn(5, 3, 256)
    fp8 = Fp8Linear(linear)
    assert fp8.weight.dtype == torch.float8_e4m3fn and fp8.scale.shape == (1, 512)
    got, want = fp8(x), linear(x)
    assert got.shape == want.shape == (5, 3, 512)
    assert ((got - want).norm() / want.norm()).item() < 0.05


def test_layers_fp8_cannot_take_are_refused() -> None:
    with pytest.raises(ValueError, match="multiples of 16"):
        Fp8Linear(nn.Linear(20, 32, bias=False))
    with pytest.raises(ValueError, match="bias"):
        Fp8Linear(nn.Linear(32, 32))


def test_the_support_probe_asks_for_the_output_dtype_the_forward_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    """On Ada (L4, L40S) torch takes row-wise scales only with bfloat16 output: emulated here, a bf16 model must
    pass the probe and run, and a float16 one be refused with the flag that fixes it."""
    real, asked = torch._scaled_mm, []

    def ada(a: torch.Tensor, b: torch.Tensor, *, scale_a: torch.Tensor, scale_b: torch.Tensor,
            out_dtype: torch.dtype) -> torch.Tensor:
        asked.append(out_dtype)
        if scale_a.numel() > 1 and out_dtype != torch.bfloat16:
            raise RuntimeError("Only bf16 high precision output types are supported for row-wise scaling.")
        return real(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", ada)

    class Block(nn.Module):
        def __init__(self, dtype: torch.dtype) -> None:
            super().__init__()
            self.q_proj = nn.Linear(32, 32, bias=False, dtype=dtype)

    block = Block(torch.bfloat16)
    assert quantize_fp8(block) == 1
    assert block.q_proj(torch.randn(3, 32, dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert asked == [torch.bfloat16, torch.bfloat16]  # the probe, then the forward: the same request
    with pytest.raises(ValueError, match="into float16 .*--dtype bfloat16"):
        quantize_fp8(Block(torch.float16))


@torch.inference_mode()
def test_the_quantised_model_keeps_its_next_token_distribution(demo: DemoPaths) -> None:
    full = load_llama(demo.model, max_seq_len=64, device="cpu", dtype="float32")
    quant = load_llama(demo.model, max_seq_len=64, device="cpu", dtype="float32")
    assert quantize_fp8(quant) == len(FP8_PROJECTIONS) * quant.config.num_hidden_layers
    assert quant.model.embed_tokens.weight.dtype == torch.float32  # embeddings and output stay as they were

    def logits(model: torch.nn.Module) -> torch.Tensor:
        cache = cache_for(model, 1, 64)
        positions = torch.arange(len(PROMPT))[None]
        hidden = model(torch.tensor([PROMPT]), positions, FreshPrefill(cache, positions.view(-1)))
        return model.logits(hidden[0], orpheus.AUDIO_TOKEN_BASE, orpheus.AUDIO_TOKEN_BASE + 4096)

    want, got = logits(full).log_softmax(-1), logits(quant).log_softmax(-1)
    kl = (want.exp() * (want - got)).sum(-1)  # per position, nats
    assert kl.max().item() < 0.05
    assert (want.argmax(-1) == got.argmax(-1)).float().mean().item() >= 0.9


def test_an_fp8_engine_generates_constrained_audio_tokens(demo: DemoPaths) -> None:
    model = load_llama(demo.model, max_seq_len=256, device="cpu", dtype="float32")
    engine = Engine(model, EngineConfig(max_batch=2, max_seq_len=256, quantize="fp8"), AUDIO_CONSTRAINT.family)

    async def main() -> list[int]:
        params = SamplingParams(seed=1, max_tokens=28, stop_ids=(orpheus.STOP_TOKEN,))
        return [t async for t in engine.generate(PROMPT, params, constraint=AUDIO_CONSTRAINT)]

    try:
        tokens = asyncio.run(main())
    finally:
        engine.shutdown()
    assert isinstance(engine.runner.model.model.layers[0].mlp.up_proj, Fp8Linear)
    assert len(tokens) == 28 and all(t in AUDIO_CONSTRAINT.allowed(n) for n, t in enumerate(tokens))
