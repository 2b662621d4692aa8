"""EngineConfig's choices that only matter on a GPU, and the KV cache's size, checked where they are made (no GPU needed)."""

from __future__ import annotations

import pytest

from lyre.engine import EngineConfig


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_cuda_graphs_take_the_in_place_paths(attention: str) -> None:
    assert EngineConfig(device="cuda", cuda_graphs=True, attention=attention).resolved_attention == attention


def test_attention_is_sdpa_unless_flex_is_asked_for_and_gather_is_gone() -> None:
    for device in ("cpu", "cuda", "cuda:1"):
        assert EngineConfig(device=device).resolved_attention == "sdpa"
    assert EngineConfig(device="cuda", cuda_graphs=True).resolved_attention == "sdpa"
    with pytest.raises(ValueError, match="attention must be one of sdpa, flex"):
        EngineConfig(attention="gather")


def test_the_kv_cache_is_sized_by_bytes_or_share_or_by_default_for_max_batch_requests() -> None:
    from lyre.models.config import LlamaConfig

    model = LlamaConfig(vocab_size=8, hidden_size=64, intermediate_size=8, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    per_block = 2 * 2 * 2 * 64 * 16 * 4  # keys and values, layers, kv heads, 64 positions, head_dim, float32
    assert EngineConfig(max_batch=3, max_seq_len=200).kv_blocks(model) == 3 * 4  # 200 positions: 4 blocks of 64
    assert EngineConfig(max_seq_len=200, kv_cache_bytes=10 * per_block + 1).kv_blocks(model) == 10
    assert EngineConfig(max_seq_len=200, kv_cache_fraction=0.5).kv_blocks(model, free_bytes=20 * per_block) == 10
    assert EngineConfig(device="cuda", dtype="bfloat16", max_seq_len=200).resolved_block_size == 16
    assert EngineConfig(attention="flex").resolved_block_size == 128
    with pytest.raises(ValueError, match="cannot hold one request of max_seq_len 200"):
        EngineConfig(max_seq_len=200, kv_cache_bytes=3 * per_block).kv_blocks(model)
    with pytest.raises(ValueError, match="kv_cache_bytes or kv_cache_fraction, not both"):
        EngineConfig(kv_cache_bytes=1, kv_cache_fraction=0.5)
    with pytest.raises(ValueError, match="multiple of 128"):
        EngineConfig(attention="flex", block_size=64)
    with pytest.raises(ValueError, match="max_step_tokens must exceed"):
        EngineConfig(max_batch=8, max_step_tokens=8)
    assert EngineConfig(max_batch=400).step_tokens == 800 and EngineConfig().step_tokens == 512


