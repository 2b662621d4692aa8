"""lyre.models.folder: resolving names to folders and reading their files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import huggingface_hub.constants
import pytest
import torch
from huggingface_hub.errors import LocalEntryNotFoundError, RepositoryNotFoundError
from safetensors.torch import save_file

from lyre.models.demo import DEMO_LLAMA_CONFIG, DemoPaths, demo_model
from lyre.models.folder import (
    WEIGHTS_INDEX_FILE,
    ModelFolderError,
    iter_safetensors,
    load_config,
    load_tokenizer,
    resolve,
)

ORPHEUS_ID = "canopylabs/orpheus-3b-0.1-ft"
REQUIRED = ("config.json", "tokenizer.json")


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoPaths:
    # demo_model caches on disk, so every test module asking for this folder
    # shares a single write.
    return demo_model(cache_dir=tmp_path_factory.getbasetemp() / "lyre-cache")


@pytest.fixture
def sharded(demo: DemoPaths, tmp_path: Path) -> Path:
    """A copy of the demo model with its weights split across two shards."""
    folder = tmp_path / "sharded"
    folder.mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(demo.model / name, folder / name)
    tensors = dict(iter_safetensors(demo.model))
    names = sorted(tensors)
    half = len(names) // 2
    shards = {
        "model-00001-of-00002.safetensors": names[:half],
        "model-00002-of-00002.safetensors": names[half:],
    }
    weight_map = {}
    for shard, keys in shards.items():
        save_file({k: tensors[k] for k in keys}, folder / shard, metadata={"format": "pt"})
        weight_map |= dict.fromkeys(keys, shard)
    total_size = sum(t.nbytes for t in tensors.values())
    index = {"metadata": {"total_size": total_size}, "weight_map": weight_map}
    (folder / WEIGHTS_INDEX_FILE).write_text(json.dumps(index))
    return folder


def test_local_folder_is_used_as_is(demo: DemoPaths) -> None:
    assert resolve(demo.model, REQUIRED) == demo.model
    assert resolve(str(demo.model)) == demo.model


def test_missing_local_path_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(ModelFolderError, match="no-such-model.*does not exist"):
        resolve(missing)
    with pytest.raises(ModelFolderError, match="does not exist"):
        resolve("./no-such-model")


def test_file_instead_of_folder(tmp_path: Path) -> None:
    path = tmp_path / "weights.bin"
    path.write_bytes(b"")
    with pytest.raises(ModelFolderError, match="weights.bin.*not a folder"):
        resolve(path)


def test_folder_lacking_required_files_names_them(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ModelFolderError) as caught:
        resolve(tmp_path, ["config.json", "tokenizer.json", "model.safetensors"])
    message = str(caught.value)
    assert str(tmp_path) in message
    assert "tokenizer.json" in message and "model.safetensors" in message
    assert "config.json" not in message.split("lacks")[1]


def test_offline_hub_id_explains_how_to_pass_a_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # An empty hub cache, so a real download on this machine cannot answer.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(ModelFolderError) as caught:
        resolve(ORPHEUS_ID)
    message = str(caught.value)
    assert f"could not fetch '{ORPHEUS_ID}' from the Hugging Face hub" in message
    assert "offline" in message
    assert "local folder" in message and "--model" in message


def _hub_error(kind: type[Exception], message: str) -> Exception:
    # Hub HTTP errors need a live HTTP response to construct; resolve only
    # looks at the type and the text.
    error = kind.__new__(kind)
    Exception.__init__(error, message)
    return error


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (_hub_error(RepositoryNotFoundError, "404 Client Error"), "no such repository"),
        (LocalEntryNotFoundError("cannot reach the hub"), "the hub is unreachable"),
        (ValueError("bad repo id\nmore detail"), "(ValueError: bad repo id)"),
    ],
)
def test_hub_failures_give_a_short_reason(
    monkeypatch: pytest.MonkeyPatch, error: Exception, reason: str
) -> None:
    def fail(repo_id: str, **kwargs: object) -> str:
        raise error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fail)
    with pytest.raises(ModelFolderError, match="local folder") as caught:
        resolve("owner/model")
    assert reason in str(caught.value)
    assert "more detail" not in str(caught.value)


def test_hub_id_is_fetched_with_weight_and_tokenizer_patterns(
    monkeypatch: pytest.MonkeyPatch, demo: DemoPaths
) -> None:
    calls = []

    def fetch(repo_id: str, **kwargs: object) -> str:
        calls.append((repo_id, kwargs))
        return str(demo.model)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fetch)
    assert resolve(ORPHEUS_ID, REQUIRED) == demo.model
    [(repo_id, kwargs)] = calls
    assert repo_id == ORPHEUS_ID
    assert {"*.json", "*.safetensors"} <= set(kwargs["allow_patterns"])  # type: ignore[arg-type]
    with pytest.raises(ModelFolderError, match=f"from '{ORPHEUS_ID}'.*lacks special.txt"):
        resolve(ORPHEUS_ID, ["special.txt"])


def test_load_config(demo: DemoPaths, tmp_path: Path) -> None:
    assert load_config(demo.model) == DEMO_LLAMA_CONFIG
    with pytest.raises(ModelFolderError, match="has no config.json"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ModelFolderError, match="config.json' is not valid JSON"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ModelFolderError, match="not a JSON object"):
        load_config(tmp_path)


def test_load_tokenizer(demo: DemoPaths, tmp_path: Path) -> None:
    assert load_tokenizer(demo.model).token_to_id("<|begin_of_text|>") == 128000
    with pytest.raises(ModelFolderError, match="has no tokenizer.json"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ModelFolderError, match="not a valid tokenizer"):
        load_tokenizer(tmp_path)


def test_sharded_weights_match_single_file(demo: DemoPaths, sharded: Path) -> None:
    single = dict(iter_safetensors(demo.model))
    split = dict(iter_safetensors(sharded))
    assert single.keys() == split.keys()
    assert all(torch.equal(single[k], split[k]) for k in single)


def test_missing_shard_is_named(sharded: Path) -> None:
    (sharded / "model-00002-of-00002.safetensors").unlink()
    with pytest.raises(ModelFolderError, match="lacks model-00002-of-00002.safetensors, listed in"):
        list(iter_safetensors(sharded))


def test_no_weights_at_all(tmp_path: Path) -> None:
    with pytest.raises(ModelFolderError, match="neither model.safetensors nor .*index.json"):
        list(iter_safetensors(tmp_path))


def test_malformed_index(tmp_path: Path) -> None:
    (tmp_path / WEIGHTS_INDEX_FILE).write_text('{"metadata": {}}')
    with pytest.raises(ModelFolderError, match="not a valid index"):
        list(iter_safetensors(tmp_path))
