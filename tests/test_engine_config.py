"""EngineConfig's choices that only matter on a GPU, checked where they are made (no GPU needed)."""

from __future__ import annotations

import pytest

from lyre.engine import EngineConfig


def test_cuda_graphs_refuse_gather_attention_naming_the_flags_that_work() -> None:
    # In a graph's fixed-shape step gather would copy every slot's whole max_seq_len of K/V per layer per step.
    with pytest.raises(ValueError, match="--attention sdpa or --attention flex"):
        EngineConfig(device="cuda", cuda_graphs=True, attention="gather")


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_cuda_graphs_take_the_in_place_paths(attention: str) -> None:
    assert EngineConfig(device="cuda", cuda_graphs=True, attention=attention).resolved_attention == attention


def test_left_unset_attention_is_in_place_with_graphs_and_gather_only_for_eager_cuda() -> None:
    assert EngineConfig(device="cuda", cuda_graphs=True).resolved_attention == "sdpa"
    assert EngineConfig(device="cuda:1", cuda_graphs=True).resolved_attention == "sdpa"
    assert EngineConfig(device="cuda").resolved_attention == "gather"  # the reference until a GPU run compares
    assert EngineConfig(device="cpu").resolved_attention == "sdpa"
    assert EngineConfig(device="cuda", attention="gather").resolved_attention == "gather"  # eager may compare
