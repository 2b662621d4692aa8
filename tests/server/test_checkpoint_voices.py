"""A server whose model folder is one of the multilingual checkpoints (by its name: the demo's weights under the
German finetune's folder name): its voices with their language, a voice and language that disagree, emotive
tags the checkpoint was not trained on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import httpx
import pytest

from lyre.models.demo import DemoPaths
from serving import Server, running_server

GERMAN_ID = "canopylabs/3b-de-ft-research_release"
SPEECH = {"response_format": "pcm", "max_tokens": 14, "seed": 1, "trim_silence": False}


def checkpoint_folder(demo: DemoPaths, folder: Path) -> Path:
    """``folder``: the demo model's files, linked, under a known checkpoint's folder name."""
    folder.mkdir(parents=True)
    for file in demo.model.iterdir():
        (folder / file.name).symlink_to(file)
    return folder


@pytest.fixture(scope="module")
def server(demo: DemoPaths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    folder = checkpoint_folder(demo, tmp_path_factory.mktemp("models") / "3b-de-ft-research_release")
    with running_server("--model", str(folder), "--codec", str(demo.codec), "--max-streams", "2") as running:
        yield running


def _speak(server: Server, **fields: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", json={**SPEECH, **fields}, timeout=60)


def test_the_voices_are_the_german_finetunes_each_with_its_language(server: Server) -> None:
    listing = httpx.get(f"{server.url}/v1/audio/voices", timeout=10).json()["voices"]
    voices = {v["id"]: v for v in listing}
    assert [v["id"] for v in listing[:3]] == ["jana", "thomas", "max"]
    assert all(voices[v]["language"] == "de" for v in ("jana", "thomas", "max"))
    assert voices["alloy"]["alias_of"] in ("jana", "thomas", "max") and voices["alloy"]["language"] == "de"
    assert "tara" not in voices


def test_a_voice_and_a_language_that_disagree_are_a_400_naming_both(server: Server) -> None:
    refused = _speak(server, input="Bonjour.", voice="jana", language="fr")
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["param"] == "language"
    assert "'jana'" in error["message"] and "German" in error["message"] and "'fr'" in error["message"]
    assert _speak(server, input="Guten Tag.", voice="jana", language="de").status_code == 200
    assert _speak(server, input="Guten Tag.", voice="alloy", language="de-AT").status_code == 200


def test_a_tag_the_checkpoint_was_not_trained_on_is_a_warning(server: Server) -> None:
    warned = _speak(server, input="Na gut <whimper> <嬉笑>.", voice="max")
    assert warned.status_code == 200 and warned.content
    header = unquote(warned.headers.get("x-lyre-tag-warnings", ""))
    assert "<whimper>" in header and "<嬉笑>" in header and GERMAN_ID in header
    trained = _speak(server, input="Na gut <laugh>.", voice="max")
    assert trained.status_code == 200 and "x-lyre-tag-warnings" not in trained.headers

