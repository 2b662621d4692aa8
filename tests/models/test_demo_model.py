"""lyre.models.demo: the tiny random Orpheus stand-in, checked against real loaders."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

import lyre.models.demo as demo_module
from lyre.models.demo import (
    DEMO_LLAMA_CONFIG,
    SNAC_24KHZ_CONFIG,
    DemoPaths,
    build_orpheus_tokenizer,
    demo_model,
    write_demo_model,
)
from lyre.models.folder import iter_safetensors, load_config

SPECIAL_IDS = {
    "<|begin_of_text|>": 128000,
    "<|eot_id|>": 128009,
    "<custom_token_0>": 128256,
    "<custom_token_1>": 128257,  # start of speech
    "<custom_token_2>": 128258,  # end of speech
    "<custom_token_3>": 128259,  # start of human
    "<custom_token_4>": 128260,  # end of human
    "<custom_token_5>": 128261,  # start of AI
    "<custom_token_6>": 128262,  # end of AI
    "<custom_token_7>": 128263,  # pad
    "<custom_token_10>": 128266,  # first audio token
    "<custom_token_28682>": 156938,  # last custom token
}
SAMPLE = "<custom_token_3><|begin_of_text|>tara: Hello there, world!<|eot_id|><custom_token_4>"
ORPHEUS_FILES = {
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
}
SNAC_FILES = {"config.json", "pytorch_model.bin"}
SAMPLES_PER_FRAME = 2048


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    # demo_model caches on disk, so every test module asking for this folder
    # shares a single write.
    return demo_model(cache_dir=tmp_path_factory.getbasetemp() / "lyre-cache")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return build_orpheus_tokenizer()


# --- tokenizer ---------------------------------------------------------------


@pytest.mark.parametrize(("token", "token_id"), SPECIAL_IDS.items())
def test_special_token_ids(tokenizer: Tokenizer, token: str, token_id: int) -> None:
    assert tokenizer.token_to_id(token) == token_id
    assert tokenizer.id_to_token(token_id) == token


def test_image_token_is_gone(tokenizer: Tokenizer) -> None:
    assert tokenizer.token_to_id("<|image|>") is None
    assert "<|image|>" not in tokenizer.get_vocab()


def test_vocab_size(tokenizer: Tokenizer) -> None:
    assert tokenizer.get_vocab_size() == 156939
    assert tokenizer.id_to_token(156939) is None


def test_encoding_keeps_bos_and_custom_tokens(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode("Hello").ids[0] == 128000
    ids = tokenizer.encode(SAMPLE, add_special_tokens=False).ids
    assert ids[:2] == [128259, 128000] and ids[-2:] == [128009, 128260]


def test_builds_are_independent() -> None:
    first = build_orpheus_tokenizer()
    first.enable_padding(pad_id=128263)
    assert build_orpheus_tokenizer().padding is None


# --- demo folder -------------------------------------------------------------


def test_files_and_configs(demo: DemoPaths) -> None:
    assert {p.name for p in demo.model.iterdir()} == ORPHEUS_FILES
    assert {p.name for p in demo.codec.iterdir()} == SNAC_FILES
    assert load_config(demo.model) == DEMO_LLAMA_CONFIG
    assert load_config(demo.codec) == SNAC_24KHZ_CONFIG
    tokenizer_config = json.loads((demo.model / "tokenizer_config.json").read_text())
    assert tokenizer_config["pad_token"] == "<custom_token_7>"
    generation = json.loads((demo.model / "generation_config.json").read_text())
    assert (generation["eos_token_id"], generation["pad_token_id"]) == (128258, 128263)


def test_tensor_names_shapes_and_init(demo: DemoPaths) -> None:
    tensors = dict(iter_safetensors(demo.model))
    c = DEMO_LLAMA_CONFIG
    h, kv = c["hidden_size"], c["num_key_value_heads"] * c["head_dim"]
    assert tensors["model.embed_tokens.weight"].shape == (c["vocab_size"], h)
    assert tensors["model.layers.3.self_attn.k_proj.weight"].shape == (kv, h)
    assert tensors["model.layers.0.mlp.down_proj.weight"].shape == (h, c["intermediate_size"])
    assert "lm_head.weight" not in tensors
    assert len(tensors) == 2 + 9 * c["num_hidden_layers"]
    assert all(t.dtype == torch.float32 for t in tensors.values())
    assert torch.equal(tensors["model.norm.weight"], torch.ones(h))
    std = tensors["model.embed_tokens.weight"].std().item()
    assert std == pytest.approx(0.02, rel=0.01)


def test_transformers_loads_the_llama(demo: DemoPaths) -> None:
    transformers = pytest.importorskip("transformers")
    model, info = transformers.LlamaForCausalLM.from_pretrained(
        demo.model, output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    assert torch.equal(model.lm_head.weight, model.model.embed_tokens.weight)
    tensors = dict(iter_safetensors(demo.model))
    up_proj = tensors["model.layers.2.mlp.up_proj.weight"]
    assert torch.equal(model.model.layers[2].mlp.up_proj.weight, up_proj)


def test_transformers_tokenizer_agrees(demo: DemoPaths, tokenizer: Tokenizer) -> None:
    transformers = pytest.importorskip("transformers")
    auto = transformers.AutoTokenizer.from_pretrained(demo.model)
    expected = tokenizer.encode(SAMPLE, add_special_tokens=False).ids
    assert auto(SAMPLE, add_special_tokens=False).input_ids == expected
    assert auto.pad_token_id == 128263


def test_snac_loads_and_decodes(demo: DemoPaths) -> None:
    import snac  # already imported, warnings handled, by the demo fixture

    model = snac.SNAC.from_config(demo.codec / "config.json")
    state = torch.load(demo.codec / "pytorch_model.bin", map_location="cpu")
    assert any(k.endswith(".weight_g") for k in state)  # the hub file's naming
    result = model.load_state_dict(state, strict=False)
    assert not result.missing_keys and not result.unexpected_keys

    codec = snac.SNAC.from_pretrained(str(demo.codec))  # strict load
    frames = 3
    codes = [torch.randint(0, 4096, (1, frames * k)) for k in (1, 2, 4)]
    with torch.inference_mode():
        audio = codec.decode(codes)
    assert audio.shape == (1, 1, SAMPLES_PER_FRAME * frames)


def _all_tensors(paths: DemoPaths) -> dict[str, torch.Tensor]:
    tensors = {f"llama.{k}": t for k, t in iter_safetensors(paths.model)}
    state = torch.load(paths.codec / "pytorch_model.bin", map_location="cpu")
    return tensors | {f"snac.{k}": t for k, t in state.items()}


def test_seed_decides_the_weights(demo: DemoPaths, tmp_path: Path) -> None:
    reference = _all_tensors(demo)  # seed 0

    torch.manual_seed(1234)
    expected_draw = torch.rand(3)
    torch.manual_seed(1234)
    again = _all_tensors(write_demo_model(tmp_path, seed=0))
    assert torch.equal(torch.rand(3), expected_draw), "writing must not disturb the global RNG"
    assert reference.keys() == again.keys()
    assert all(torch.equal(reference[k], again[k]) for k in reference)

    # Rewriting over an existing demo replaces it and leaves no staging folder.
    other = _all_tensors(write_demo_model(tmp_path, seed=1))
    assert {p.name for p in tmp_path.iterdir()} == {"orpheus", "snac"}
    for key in ("llama.model.embed_tokens.weight", "snac.decoder.model.0.weight_v"):
        assert not torch.equal(reference[key], other[key])


# --- the cached demo ---------------------------------------------------------


def test_demo_model_is_written_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first = demo_model(cache_dir=tmp_path)
    assert first.model == tmp_path / "demo-v1" / "orpheus"
    assert first.codec == tmp_path / "demo-v1" / "snac"

    weights = first.model / "model.safetensors"
    mtime = weights.stat().st_mtime_ns
    assert demo_model(cache_dir=tmp_path) == first
    assert weights.stat().st_mtime_ns == mtime
    # Silent: only lyre.models.choice knows why the demo is used (tests/test_model_choice.py).
    assert capsys.readouterr().err == ""


def test_demo_model_reads_cache_env(demo: DemoPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LYRE_CACHE_DIR", str(demo.model.parent.parent))
    assert demo_model() == demo


def test_concurrent_callers_write_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = []

    def slow_write(root: Path, seed: int = 0) -> DemoPaths:
        writes.append(root)
        time.sleep(0.2)  # long enough for the other caller to reach the lock
        for name in ("orpheus", "snac"):
            (root / name).mkdir(parents=True)
        return DemoPaths(root / "orpheus", root / "snac")

    monkeypatch.setattr(demo_module, "write_demo_model", slow_write)
    results: list[DemoPaths] = []
    def call() -> None:
        results.append(demo_model(tmp_path))

    threads = [threading.Thread(target=call) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(writes) == 1
    assert results[0] == results[1]
