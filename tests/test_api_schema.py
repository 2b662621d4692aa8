"""Schemathesis against the server's own OpenAPI schema: no 5xx, no schema violations."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from serving import running_server

pytestmark = pytest.mark.slow

CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"


def test_api_conforms_to_its_own_schema(tmp_path: Path) -> None:
    # A small KV cache keeps every valid request short (at most 14 tokens, two frames) on a CPU: the
    # schema's checks need well-formed answers, not long audio.
    with running_server("--max-streams", "2", "--max-queue", "64", "--max-seq-len", "270") as server:
        cli = Path(sys.executable).with_name("st")
        done = subprocess.run(
            [str(cli), "run", f"{server.url}/openapi.json", "--checks", CHECKS, "--max-examples", "12",
             "--request-timeout", "120", "--generation-deterministic", "--workers", "1"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    tested = re.search(r"Tested: (\d+)", done.stdout)
    assert tested is not None and int(tested.group(1)) >= 6, done.stdout[-3000:]  # every operation exercised
