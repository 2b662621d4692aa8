"""Where a client may put an API key, read once for the server and the router alike (lyre.common.api_keys)."""

from __future__ import annotations

import subprocess
import sys

from lyre.common.api_keys import authorized, bearer, offered_key


def test_a_key_is_read_from_bearer_then_the_header_then_the_query() -> None:
    assert bearer({"authorization": "Bearer  k1 "}) == "k1" and bearer({"authorization": "bearer k1"}) == "k1"
    assert bearer({"authorization": "Basic k1"}) == "" and bearer({}) == ""
    both = {"authorization": "Bearer k1", "x-api-key": "k2"}
    assert offered_key(both, {"api_key": "k3"}) == "k1"
    assert offered_key({"x-api-key": "k2"}, {"api_key": "k3"}) == "k2"
    assert offered_key({}, {"api_key": "k3"}) == "k3"
    assert offered_key({"x-admin-key": "a"}, {"api_key": "k3"}, header="x-admin-key", param=None) == "a"
    assert offered_key({}, {"api_key": "k3"}, header="x-admin-key", param=None) == ""


def test_no_key_configured_lets_everyone_in_and_a_wrong_or_missing_one_does_not() -> None:
    assert authorized(None, {}, {})
    assert authorized("sesame", {"x-api-key": "sesame"}, {})
    assert not authorized("sesame", {}, {}) and not authorized("sesame", {"authorization": "Bearer sesam"}, {})
    assert not authorized("sesame", {"authorization": "Bearer séсame"}, {})  # non-ASCII: refused, not an error


def test_the_router_reads_keys_without_loading_the_server() -> None:
    code = ("import sys, lyre.common.api_keys, lyre.fleet.router.proxy_socket;"
            "print(sorted(m for m in sys.modules if m.startswith(('lyre.server', 'lyre.tts', 'torch'))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
