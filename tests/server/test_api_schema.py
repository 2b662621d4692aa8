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
    # A small KV cache keeps every valid request short on a CPU: 263 positions leave a segment 7 tokens
    # past its 256-token prompt room, one frame and one one-frame codec window, the least a request can
    # make. The schema's checks need well-formed answers, not long audio, and the ~40 speech requests
    # that answer 200 are most of the server's time here (each a few engine steps and a SNAC decode).
    with running_server("--max-streams", "2", "--max-queue", "64", "--max-seq-len", "263") as server:
        # One worker: on Python 3.11.7 Hypothesis's lambda descriptions (ast.parse) race across st's worker
        # threads ("AST constructor recursion depth mismatch", seen with 8), and on two busy cores more
        # workers, or two st processes, were not faster anyway.
        cli = Path(sys.executable).with_name("st")
        done = subprocess.run(
            [str(cli), "run", f"{server.url}/openapi.json", "--checks", CHECKS, "--max-examples", "12",
             "--request-timeout", "120", "--generation-deterministic", "--workers", "1"],
            capture_output=True, text=True, timeout=600, cwd=tmp_path,
        )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    tested = re.search(r"Tested: (\d+)", done.stdout)
    assert tested is not None and int(tested.group(1)) >= 6, done.stdout[-3000:]  # every operation exercised
